"""What a job's flow established, as typed facts; its result is assembled from them once, in
:mod:`orchestration.verdicts`.

A flow (:mod:`orchestration.flows`) returns one of :data:`Facts`:

- :class:`Evaluated`: /evaluate or /validate ran its kernel (and /evaluate timed it);
- :class:`Compared`: a comparison that has its reference's figure (:class:`Reference`), and
  what became of the candidate: :class:`Judged` (it passed every check and was timed),
  :class:`Wrong` (outputs wrong in a trial or in the recheck after timing),
  :class:`SampleWrong` (a timed sample's outputs wrong) or :class:`Failed`;
- :class:`Failed`: a side's own failure, in its own words (a reference's ends a comparison).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from orchestration.job_step import Side
from orchestration.placement import Seat
from orchestration.ref_cache import Figure
from orchestration.worker import Worker
from orchestration.worker_kinds import Warm
from profiling.integrity import PairedRatios, TimingVerdict
from shared.models import JitCache, JudgeCalibration, RobustnessReport, WorkerJob
from shared.protocol import (
    Audited,
    Calibrated,
    CallTrace,
    Failure,
    Incorrect,
    JudgedTiming,
    ProblemWork,
    Resources,
    TensorMeta,
    TrialsPassed,
)


@dataclass(frozen=True)
class Where:
    """The device a job ran on."""

    device: Literal["cuda", "cpu"]
    gpu_type: str
    gpu_id: int | None  # the physical GPU

    @classmethod
    def of(cls, job: WorkerJob, seat: Seat) -> Where:
        return cls("cuda" if seat.device == "cuda" else "cpu", seat.gpu_type, job.gpu_id)


@dataclass(frozen=True)
class ProcessSetup:
    """How a kernel's process was made (:mod:`orchestration.worker_pool`): its context's
    hardware work queues and what it warmed and rehearsed beside the context."""

    queues: str | None
    warmed: Warm | None

    @classmethod
    def of(cls, worker: Worker) -> ProcessSetup:
        return cls(worker.queues, worker.warmed)


@dataclass(frozen=True)
class KernelProcess:
    """A process a kernel was loaded in: where, what its compilers produced, how it was made."""

    where: Where
    artifacts: dict[str, str]
    setup: ProcessSetup


@dataclass(frozen=True)
class Held:
    """What a kernel's process held (its memory) for a problem of this size."""

    resources: Resources
    input_bytes: int
    output_bytes: int


@dataclass(frozen=True)
class Timed:
    """A timing's verdict, and the GPU's state the server sampled around it."""

    verdict: TimingVerdict
    gpu_state: dict[str, Any] | None


@dataclass(frozen=True)
class Evaluated:
    """A kernel alone ran (/validate), and was timed (/evaluate: ``timed``)."""

    process: KernelProcess
    outputs: list[TensorMeta]
    held: Held
    timed: Timed | None
    jit_cache: JitCache | None
    trace: CallTrace | None = None  # its process's trace of one more call (/evaluate)


@dataclass(frozen=True)
class Reference:
    """A comparison's reference: loaded in its judge, and the figure it is measured by."""

    process: KernelProcess
    verdict: TimingVerdict  # the figure's, judged
    figure: Figure
    reused: bool  # the figure was taken by another job
    # its samples taken in turn with the candidate's (judge.beside): the speedup is theirs
    paired: PairedRatios | None = None


@dataclass(frozen=True)
class Judged:
    """A candidate that passed its trials, its timing's audit and its recheck."""

    process: KernelProcess
    timed: Timed
    held: Held
    trials: int
    passed: TrialsPassed
    calibrated: Calibrated
    calibration: JudgeCalibration  # which measurement of the null call judged it
    audited: Audited
    jit_cache: JitCache | None
    review_threshold: float  # a speedup above it is flagged for review
    work: ProblemWork | None = None  # the problem's work, as the judge counted it
    trace: CallTrace | None = None  # its process's trace of one more call
    robustness: RobustnessReport | None = None  # the cases beyond the trials, when asked for
    # the reference's reading taken beside this candidate's (judge.beside): the comparison's
    # reference figure where there is one, and the two readings' samples pair by pair
    beside: JudgedTiming | None = None
    pairs: PairedRatios | None = None


@dataclass(frozen=True)
class Wrong:
    """A candidate whose outputs the judge found wrong in a trial, or in the recheck."""

    found: Incorrect
    trials: int


@dataclass(frozen=True)
class SampleWrong:
    """A candidate whose outputs were wrong in a timed sample the judge checked."""

    audited: Audited
    held: Held


@dataclass(frozen=True)
class Failed:
    """A side's own failure (a compile or runtime error), from the process that ran it or
    from the judge on its behalf."""

    side: Side
    failure: Failure


@dataclass(frozen=True)
class Compared:
    """A comparison that got as far as its reference's figure."""

    reference: Reference
    candidate: Judged | Wrong | SampleWrong | Failed


Facts: TypeAlias = Evaluated | Compared | Failed
