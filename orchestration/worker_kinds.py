"""What a job asks of the process it runs in, and the kinds of worker the pool keeps for it.

A job's source decides whether its process needs CUDA's default hardware work queues
(:func:`uses_streams`) and cuBLAS warmed (:func:`uses_cublas`); its kind decides whether the
process will only run a kernel alone (/evaluate, /validate) or take part in a comparison.
Together they are its :class:`Needs`. A GPU spare is made as one :class:`Warm` (the libraries
it warms, the paths of the harness it rehearses); :func:`best_ready` picks, among the ready
ones, the spare for a job. Nothing here starts a process: :mod:`orchestration.worker_pool`
does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from shared.protocol import (
    REHEARSE_ALL,
    REHEARSE_ALONE,
    REHEARSE_ENV,
    SPARE_WARM_ENV,
    WARM_BASE,
    WARM_CUBLAS,
    WARM_NONE,
)

# A CUDA context sets up one hardware work queue per possible stream connection
# (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default), and the driver serialises their set-up and
# teardown across processes: every job pays one of each, and the next timing waits for the
# teardown. So spares make one queue, and a job whose source may use several streams or a
# CUDA graph (:func:`uses_streams`), which one queue would serialise, gets a worker made for
# it with CUDA's default. An operator's own CUDA_DEVICE_MAX_CONNECTIONS decides for every worker.
QUEUES_ENV = "CUDA_DEVICE_MAX_CONNECTIONS"
ONE_QUEUE = "1"
CUDA_DEFAULT_QUEUES = "8"
_STREAM_WORDS = re.compile(r"stream|graph", re.IGNORECASE)


def uses_streams(source: str | None) -> bool:
    """Whether ``source`` may put work on more than one stream: it names a stream or a CUDA
    graph anywhere (torch.cuda.Stream, cudaStream_t, cupy.cuda.Stream, streams of a
    C++ extension, torch.cuda.graph, cudaGraph...). A false alarm costs the job a worker
    started for it; a source that hides such a use only serialises its own streams."""
    return source is not None and _STREAM_WORDS.search(source) is not None


# A matrix product in any spelling a source may use (torch's operator and functions, its
# modules built on them, cuBLAS called from C++ or CUDA): `a @ b` but not a decorator.
_CUBLAS_WORDS = re.compile(
    r"[\w)\]][ \t]*@|matmul|\bmm\b|bmm|addm|\bmv\b|\bdot\b|\binner\b|einsum|tensordot|"
    r"linear|linalg|cdist|attention|lstm|\bgru|rnn|transformer|conv|gemm|cublas",
    re.IGNORECASE)


def uses_cublas(source: str | None) -> bool:
    """Whether ``source`` may call cuBLAS (an unknown source may). Its job takes a spare that
    warmed cuBLAS; the others take one that did not, whose start and exit cost the driver
    less. A false alarm costs the job that exit; a miss, its first matmul's set-up before its
    samples: in its first trial or its warm-up, never in a timed sample."""
    return source is None or _CUBLAS_WORDS.search(source) is not None


@dataclass(frozen=True)
class Needs:
    """What a job asks of the process it runs in: from its source, and from its kind."""

    streams: bool = False  # several streams or a CUDA graph: CUDA's default work queues
    cublas: bool = True  # may call cuBLAS: a spare that warmed it
    alone: bool = False  # runs a kernel alone (/evaluate, /validate): no judge, no pairing

    @classmethod
    def of(cls, source: str | None, alone: bool = False) -> Needs:
        return cls(uses_streams(source), uses_cublas(source), alone)


UNKNOWN_SOURCE = Needs()  # what a job whose source is not known may need

_LIBS = (WARM_NONE, WARM_BASE, WARM_CUBLAS)  # each warms what the one before it does, and more


@dataclass(frozen=True)
class Warm:
    """What a GPU worker does before it says it is ready, beside making its CUDA context:
    the libraries it warms (``libs``: ``cublas``, ``base`` or ``none``) and the
    harness's paths it rehearses (``alone``: a kernel alone, the path of /evaluate and
    /validate; else a comparison's too, its judge's and its paired kernel's).

    Each spare is made for the kind of job that took the one it replaces. A lighter start
    leaves the driver freer for the exit that the next timing waits for, and a lighter
    process exits sooner (docs/WORKER_DESIGN.md)."""

    libs: str
    alone: bool = False

    def env(self) -> dict[str, str]:
        """What tells the worker (``harness.process``, ``subprocess_worker.rehearse``)."""
        return {SPARE_WARM_ENV: self.libs,
                REHEARSE_ENV: REHEARSE_ALONE if self.alone else REHEARSE_ALL}

    def weight(self) -> tuple[int, bool]:
        """Orders kinds by what they cost the driver to start and to tear down."""
        return _LIBS.index(self.libs), not self.alone

    def covers(self, needed: Warm) -> bool:
        """Whether a worker warmed so has warmed everything ``needed`` has (a job given it
        pays for nothing cold)."""
        return (_LIBS.index(self.libs) >= _LIBS.index(needed.libs)
                and (needed.alone or not self.alone))


class Spare(Protocol):
    """What :func:`best_ready` reads of a worker: what it warmed (None: not a GPU spare)."""

    @property
    def warmed(self) -> Warm | None: ...


S = TypeVar("S", bound=Spare)


def best_ready(ready: Sequence[S], warm: Warm | None) -> S:
    """Of the ready workers, one warmed as ``warm`` says, else the lightest of those warmed
    for more (the job pays for nothing cold, though its process exits slower), else the
    first."""
    exact = next((w for w in ready if w.warmed == warm), None)
    if exact is not None or warm is None:
        return exact or ready[0]
    covering = [(w.warmed.weight(), i) for i, w in enumerate(ready)
                if w.warmed is not None and w.warmed.covers(warm)]
    return ready[min(covering)[1]] if covering else ready[0]
