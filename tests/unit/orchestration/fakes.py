"""A fake seat and fake workers for driving the flows in-process: each worker answers from a
script (a function of the request), every request is recorded, and replies are interpreted by
the real seat's rule (:func:`orchestration.placement.interpret`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from orchestration.job_step import Clock, JobStep, Side, Stage
from orchestration.placement import Observed, interpret
from orchestration.ref_cache import ReferenceFigures
from orchestration.references import Judge
from shared.models import RobustnessReport, WorkerJob
from shared.protocol import (
    Audited,
    Calibrated,
    CallDone,
    Done,
    JudgedTiming,
    KernelTimed,
    Loaded,
    Message,
    Resources,
    RobustnessChecked,
    TimingReport,
    TrialsPassed,
)

Script = Callable[[Message], Message]


@dataclass
class FakeWorker:
    label: str
    script: Script
    requests: list[Message] = field(default_factory=list)
    status: int | None = None
    killed: bool = False
    jit: Any = None
    queues: str | None = None
    warmed: str | None = None
    contained: bool = True

    def answer(self, message: Message) -> Message:
        self.requests.append(message)
        return self.script(message)

    def ops(self) -> list[str]:
        return [str(getattr(m, "op", type(m).__name__)) for m in self.requests]


class FakeSeat:
    """A seat on a device with scripted workers (taken in order from ``workers``; the process
    the reference is timed in is ``reference_partner``, made when not given)."""

    device = "cuda"
    gpu_type = "NVIDIA H100 80GB HBM3"
    jit = None  # no JIT store: the flows run without one

    def __init__(self, workers: list[FakeWorker],
                 reference_partner: FakeWorker | None = None) -> None:
        self.workers = list(workers)
        self.reference_partner = reference_partner or FakeWorker("reference partner",
                                                                 kernel_script())
        self.taken: list[FakeWorker] = []
        self.clock = Clock()
        self.step = JobStep()
        self.timed_ops: list[str] = []
        self.log: list[str] = []  # every request's op, and each worker let go, in order
        self.progress_texts: list[str] = []
        self.needs: list[Any] = []  # what each take asked for (worker_kinds.Needs)

    async def take(self, label: str, needs: Any = None) -> Any:
        self.needs.append(needs)
        worker = self.reference_partner if label.startswith("reference") else self.workers.pop(0)
        worker.label = label
        self.taken.append(worker)
        return worker

    async def call(self, worker: Any, side: Side, stage: Stage, message: Message,
                   expected: Any, fds: list[int] | None = None) -> Any:
        self.step.set(side, stage)
        self.log.append(str(getattr(message, "op", type(message).__name__)))
        return interpret(side, message, worker.answer(message), expected)

    async def timed(self, worker: Any, side: Side, stage: Stage, message: Message,
                    expected: Any, settle_s: float | None = None) -> tuple[Any, Observed]:
        self.timed_ops.append(str(getattr(message, "op", "")))
        return await self.call(worker, side, stage, message, expected), Observed(1.0, None)

    async def progress(self, text: str, fraction: float) -> None:
        self.progress_texts.append(text)

    @contextlib.asynccontextmanager
    async def holding_spares(self) -> AsyncIterator[None]:
        yield

    @contextlib.asynccontextmanager
    async def alone(self) -> AsyncIterator[None]:
        yield

    async def last_job_gone(self) -> None:
        return None

    def release(self, worker: Any, healthy: bool) -> None:
        return None

    def let_go(self, worker: Any) -> None:
        self.log.append(f"let go of the {worker.label}")
        worker.killed = True


class FakeJudges:
    """Hands out one scripted judge, loading it on its first lease."""

    def __init__(self, judge: FakeWorker) -> None:
        self.judge = judge
        self.given_back: list[bool] = []
        self.leased: Judge | None = None  # the one judge, as the server keeps it

    async def lease(self, job: WorkerJob, key: str, seat: FakeSeat) -> Judge:
        from shared.protocol import Load, Role

        if self.leased is None:
            loaded = await seat.call(self.judge, Side.REFERENCE, Stage.COMPILING,
                                     Load(job=job, role=Role.JUDGE), Loaded)
            self.leased = Judge(self.judge, key, loaded, None)  # type: ignore[arg-type]
        return self.leased

    def give_back(self, judge: Judge, seat: FakeSeat, healthy: bool) -> None:
        self.given_back.append(healthy)


@dataclass
class FakeReferences:
    judges: FakeJudges
    figures: ReferenceFigures
    review_threshold: float = 10.0


# ---- scripted answers ----------------------------------------------------------------------


def report(event_ms: list[float], **extra: Any) -> TimingReport:
    base: dict[str, Any] = {"method": "cuda_event+l2_flush", "event_ms": event_ms,
                            "host_sync_ms": [max(event_ms) + 0.01] * 3,
                            "device_busy_ms": sorted(event_ms)[len(event_ms) // 2],
                            "device_busy_calls": 3, "fresh_inputs": len(event_ms)}
    base.update(extra)
    return TimingReport(**base)


def kernel_timed(figure_ms: list[float], null_ms: float = 0.2, **extra: Any) -> KernelTimed:
    """The judge's timing of a call whose samples read ``figure_ms`` beyond a hand-over of
    ``null_ms``."""
    return KernelTimed(timing=JudgedTiming(clock="cuda_events",
                                           trusted_ms=[f + null_ms for f in figure_ms],
                                           calibration_ms=[null_ms] * 16,
                                           fresh_inputs=len(figure_ms), **extra),
                       resources=Resources(peak_memory_bytes=20), input_bytes=64,
                       output_bytes=32)


def judge_script(*, trials: Message | None = None, timed: Message | None = None,
                 audited: Message | None = None, recheck: Message | None = None,
                 robust: Message | None = None, ref_ms: float = 1.0, kernel_ms: float = 1.0,
                 kept: bool = True) -> Script:
    """A judge that loads, calibrates, times the reference at ``ref_ms`` (a timing asked with
    no reference figure), and answers the candidate's steps as given (passing ones by
    default). Asked for a kept calibration, it answers with the one it measured earlier, if
    any (none when ``kept`` is false)."""
    seen: list[Message] = []
    passed = TrialsPassed(ran=5, input_bytes=64, output_bytes=32,
                          reference_resources=Resources(peak_memory_bytes=30))

    def script(message: Message) -> Message:
        op = getattr(message, "op", "")
        if op == "load":
            return Loaded()
        if op in ("pair", "unpair", "prepare_samples"):
            return Done()
        if op == "calibrate":
            if getattr(message, "kept", False):  # what it measured before, where it holds one
                held = kept is not False and any(
                    getattr(m, "op", "") == "calibrate" and not getattr(m, "kept", False)
                    for m in seen)
                seen.append(message)
                return Calibrated(arena_bytes=4096, where="device",
                                  null_call_ms=[0.2] * 20 if held else [], kept=held)
            seen.append(message)
            return Calibrated(arena_bytes=4096, where="device", null_call_ms=[0.2] * 20)
        if op == "trials":
            if getattr(message, "recheck", False):
                return recheck or passed
            return trials or passed
        if op == "time_kernel":
            if getattr(message, "reference_ms", 0.0) == 0.0:  # the reference's own timing
                return kernel_timed([ref_ms] * 10)
            return timed or kernel_timed([kernel_ms] * 10)
        if op == "audit":
            return audited or Audited(checked=[3, 7], samples=10)
        if op == "robustness":
            return robust or RobustnessChecked(report=RobustnessReport.of([], "none declared"))
        raise AssertionError(f"the judge was not expected to get {message!r}")
    return script


def kernel_script(load: Message | None = None) -> Script:
    def script(message: Message) -> Message:
        op = getattr(message, "op", "")
        if op == "pair":
            return Done()
        if op == "load":
            return load or Loaded()
        raise AssertionError(f"the kernel's process was not expected to get {message!r}")
    return script


__all__ = ["CallDone", "FakeReferences", "FakeSeat", "FakeWorker", "judge_script",
           "kernel_script", "kernel_timed", "report"]
