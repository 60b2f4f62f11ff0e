"""A fake :class:`~orchestration.executor.Executor`: each job gets a scripted answer.

``FakeExecutor(script)`` calls ``script(job)`` for every job it is given and runs the
behaviour it returns: :func:`answer` (a WorkerResult, optionally held at a :class:`Gate`),
:func:`raise_error` or :func:`hang` (until cancelled). It records the jobs in the order they
reached it, and whether it was started and closed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable

from orchestration.executor import ExecutorStatus
from shared.models import (
    JobState,
    KernelExecResult,
    Outcome,
    RuntimeStats,
    WorkerJob,
    WorkerResult,
)

ProgressFn = Callable[[str, float], Awaitable[None]]
Behaviour = Callable[[WorkerJob, float, ProgressFn], Awaitable[WorkerResult]]
GATE_DEADLINE_S = 30.0


class Gate:
    """Holds a job at one point until opened; can be opened from any thread."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self._opened = threading.Event()

    def open(self) -> None:
        self._opened.set()

    async def passage(self) -> None:
        self.reached.set()
        deadline = time.monotonic() + GATE_DEADLINE_S
        while not self._opened.is_set():
            if time.monotonic() > deadline:
                raise TimeoutError("the test never opened this gate")
            await asyncio.sleep(0.002)


def stats(mean: float) -> RuntimeStats:
    return RuntimeStats(
        mean=mean, std=0.01, min=mean * 0.9, max=mean * 1.2, median=mean,
        percentile_95=mean * 1.1, percentile_99=mean * 1.15, num_samples=10,
        method="cpu_perf_counter", device="cpu",
    )


def success(mean: float = 1.0) -> KernelExecResult:
    return KernelExecResult(
        outcome=Outcome.SUCCESS, compiled=True, correctness=True, runtime=mean,
        runtime_stats=stats(mean),
    )


def compared(custom_ms: float = 1.0, ref_ms: float = 2.0) -> WorkerResult:
    """A comparison that succeeded: the custom kernel correct, both timed."""
    return WorkerResult(
        kernel_exec_result=success(custom_ms), ref_exec_result=success(ref_ms),
        stage_timings={"queue_wait": 0.5, "compile": 5.0, "timing": 10.0, "total": 16.0},
    )


def compile_error(message: str = "SyntaxError: invalid syntax (line 3)") -> WorkerResult:
    return WorkerResult(
        kernel_exec_result=KernelExecResult(
            outcome=Outcome.COMPILE_ERROR, compiled=False, compilation_error=message
        ),
        ref_exec_result=success(2.0),
        stage_timings={"compile": 3.0, "total": 3.5},
    )


def timed_out(message: str = "the job ran past its timeout of 5 s (while timing the custom "
              "kernel)", stage: str = "timing the custom kernel") -> WorkerResult:
    return WorkerResult(
        state=JobState.TIMED_OUT, error=message, stage=stage,
        kernel_exec_result=KernelExecResult(outcome=Outcome.TIMEOUT, compiled=True),
    )


def failed(message: str = "the worker process was lost") -> WorkerResult:
    return WorkerResult(state=JobState.FAILED, error=message)


def answer(result: WorkerResult, *, queued: Gate | None = None,
           running: Gate | None = None) -> Behaviour:
    """Report 'waiting' (the job stays queued), pass ``queued``, report 'running', pass
    ``running``, then answer ``result``."""

    async def behave(job: WorkerJob, timeout: float, progress: ProgressFn) -> WorkerResult:
        await progress("waiting for a device", 0.05)
        if queued is not None:
            await queued.passage()
        job.gpu_id = 0 if job.device == "cuda" else None
        await progress("running", 0.5)
        if running is not None:
            await running.passage()
        return result.model_copy(deep=True)

    return behave


def raise_error(exc: Exception) -> Behaviour:
    async def behave(job: WorkerJob, timeout: float, progress: ProgressFn) -> WorkerResult:
        await progress("running", 0.5)
        raise exc

    return behave


def hang(gate: Gate | None = None) -> Behaviour:
    """Report 'running', then never return until cancelled."""

    async def behave(job: WorkerJob, timeout: float, progress: ProgressFn) -> WorkerResult:
        await progress("running", 0.5)
        if gate is not None:
            gate.reached.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    return behave


class FakeExecutor:
    """Runs every job with ``script(job)``'s behaviour (default: a successful comparison)."""

    def __init__(self, script: Callable[[WorkerJob], Behaviour] | None = None) -> None:
        self.script = script or (lambda job: answer(compared()))
        self.jobs: list[WorkerJob] = []
        self.queued = 0  # what queue_length() says
        self.started = False
        self.closed = False

    async def run(self, job: WorkerJob, timeout: float, progress: ProgressFn) -> WorkerResult:
        self.jobs.append(job)
        return await self.script(job)(job, timeout, progress)

    def status(self) -> ExecutorStatus:
        return ExecutorStatus(queue_length=self.queued)

    async def start(self) -> None:
        self.started = True

    async def close(self) -> None:
        self.closed = True
