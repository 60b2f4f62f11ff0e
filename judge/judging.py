"""What the judge's helpers (:mod:`judge.audit`, :mod:`judge.trials`, :mod:`judge.robustness`)
may use of the judge's session: :class:`Judging`, which :class:`judge.session.JudgeSession`
satisfies, and the records they share with it. The helpers import this module, never the
session, which imports them.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from compilation.base import Arguments, ExecutableKernel
from harness.arena import Arena
from harness.inputs import SampleInputs
from harness.tensors import Staged
from harness.timer import Timer
from judge.clock import CandidateRun
from judge.partner import Partner
from shared.models import WorkerJob
from shared.observations import ProblemWork


@dataclass
class Prepared:
    """Timed samples' inputs made ahead of the timing run, and their fingerprints."""

    fresh: SampleInputs  # makes the samples beyond them
    values: list[list[Any]]
    prints: list[list[list[int]]]


@dataclass
class Trial0:
    outputs: list[torch.Tensor]
    mutates: bool
    prints: list[list[int]]
    input_bytes: int
    output_bytes: int
    values: list[Any] | None
    work: ProblemWork | None = None  # its FLOPs and bytes (judge.flops)


class Laps:
    """Wall time of a request's steps, summed per step name (ms)."""

    def __init__(self) -> None:
        self.start()

    def start(self) -> None:
        self.ms: dict[str, float] = {}
        self.mark = time.perf_counter()

    def lap(self, step: str) -> None:
        now = time.perf_counter()
        self.ms[step] = self.ms.get(step, 0.0) + (now - self.mark) * 1e3
        self.mark = now

    def taken(self) -> dict[str, float]:
        """The steps so far and the time since the last (``other``), rounded; counting
        starts again."""
        self.lap("other")
        taken = {step: round(ms, 3) for step, ms in self.ms.items()}
        self.start()
        return taken


class Judging(Protocol):
    """The judge's session as its helpers see it."""

    device: str
    timer: Timer
    job: WorkerJob | None  # the job that loaded the reference
    comparison: WorkerJob | None  # the job of the pairing now
    secret: int | None
    arena: Arena | None
    run: CandidateRun | None
    prepared: Prepared | None
    run_inputs: SampleInputs | None
    spent: Laps
    saved_state: dict[str, torch.Tensor] | None  # the reference's module state as loaded
    peak_trial_memory: int

    def scope(self) -> contextlib.AbstractContextManager[Any]: ...

    def kernel(self) -> ExecutableKernel: ...

    def make_inputs(self, trial: int, salt: int) -> Arguments: ...

    def run_reference(self, args: Arguments, wait: bool = True) -> list[torch.Tensor]: ...

    def resolved(self, *staged: Staged[Any]) -> list[Any]: ...

    def sample_values(self, fresh: SampleInputs, i: int) -> list[Any]: ...

    def first_trial(self) -> Trial0: ...

    def trial0_values(self) -> list[Any]: ...

    def module_buffers(self) -> dict[str, torch.Tensor] | None: ...

    def paired(self) -> Partner: ...
