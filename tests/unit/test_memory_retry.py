"""A job that ran out of GPU memory runs once more with the GPU to itself (the last job's
processes gone, no worker starting), and only the second attempt's verdict stands; other
failures are final at once."""

from __future__ import annotations

import asyncio
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from orchestration.executor import _out_of_gpu_memory
from orchestration.gpu_pool import Slot
from orchestration.worker_pool import PoolKey
from shared.models import KernelCode, KernelExecResult, Outcome, WorkerJob, WorkerResult
from tests.unit.conftest import gpu_executor

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB.\n"
       "the problem does not fit on this GPU: 5 bytes free of 80")
SHARE = ("the tensors could not be shared on the GPU (6442450944 bytes; 372703232 bytes free "
         "of 85017493504): allocating 6442450944 bytes of GPU memory to share: CUDA error 2")


class Output:
    total_bytes = 0

    def text(self) -> str:
        return ""

    def tail(self, n: int) -> str:
        return ""


class FakeWorker:
    def __init__(self) -> None:
        self.status: int | None = None
        self.killed = False
        self.closed = False
        self.output = Output()
        self.label = "kernel"
        self.scratch = None

    def kill(self) -> None:
        self.killed = True

    async def exit_status(self, timeout: float = 5.0) -> int | None:
        if self.killed:
            self.status = 9
        return self.status

    async def close(self) -> None:
        self.closed = True


def job(tmp_path: Path) -> WorkerJob:
    return WorkerJob(job_id="j", kind="evaluate", device="cuda",
                     kernel=KernelCode(source_code="x = 1", kernel_type="torch"),
                     cache_dir=str(tmp_path / "cache"))


def failure(message: str, where: str = "runtime_error") -> WorkerResult:
    return WorkerResult(kernel_exec_result=KernelExecResult(
        outcome=Outcome.RUNTIME_ERROR if where == "runtime_error" else Outcome.COMPILE_ERROR,
        compiled=where == "runtime_error", **{where: message}))


def run_with(tmp_path: Path, verdicts: list[WorkerResult], spares: list[FakeWorker] | None = None
             ) -> tuple[WorkerResult, list[dict[str, Any]]]:
    """Run a job whose flow answers ``verdicts`` in turn, with ``spares`` ready; what each
    attempt saw."""
    ex = gpu_executor(tmp_path, spares_per_gpu=0)
    if spares:
        ex.workers._ready[PoolKey(0)] = deque(spares)  # type: ignore[arg-type]
    attempts: list[dict[str, Any]] = []

    async def flow(job: WorkerJob, slot: Slot, step: Any, held: list[Any], progress: Any,
                   clock: Any) -> WorkerResult:
        worker = FakeWorker()
        attempts.append({"held_before": list(held), "worker": worker,
                         "quiet": ex.workers._quiet.get(PoolKey(0), 0),
                         "ready": len(ex.workers._ready.get(PoolKey(0), ()))})
        held.append(worker)
        return verdicts[len(attempts) - 1]

    async def progress(_: str, __: float) -> None:
        return None

    ex._evaluate = flow  # type: ignore[method-assign]

    async def scenario() -> WorkerResult:
        result = await ex.run(job(tmp_path), 60.0, progress)
        await ex.close()
        return result

    return asyncio.run(scenario()), attempts


@pytest.mark.parametrize("message", [OOM, SHARE])
def test_a_job_out_of_gpu_memory_runs_again_on_a_quiet_gpu_and_its_second_verdict_stands(
        tmp_path: Path, message: str) -> None:
    ok = WorkerResult(kernel_exec_result=KernelExecResult(outcome=Outcome.SUCCESS, compiled=True,
                                                          correctness=True))
    spares = [FakeWorker(), FakeWorker()]
    result, attempts = run_with(tmp_path, [failure(message), ok], spares)
    assert len(attempts) == 2
    first, second = attempts
    assert first["quiet"] == 0 and second["quiet"] == 1  # no worker starts during the retry
    assert first["ready"] == 2 and second["ready"] == 0  # the idle spares' memory is freed
    assert all(s.killed for s in spares)
    assert second["held_before"] == []  # fresh workers, the first attempt's killed
    assert first["worker"].killed and first["worker"].closed
    assert result.kernel_exec_result is not None
    assert result.kernel_exec_result.outcome == Outcome.SUCCESS
    assert "second one" in result.kernel_exec_result.metadata["memory_retry"]


def test_a_problem_that_does_not_fit_on_a_quiet_gpu_either_keeps_its_verdict(tmp_path: Path) -> None:
    result, attempts = run_with(tmp_path, [failure(OOM), failure(OOM), failure(OOM)])
    assert len(attempts) == 2  # once more, not again and again
    assert result.kernel_exec_result is not None
    assert result.kernel_exec_result.outcome == Outcome.RUNTIME_ERROR
    assert "does not fit on this GPU" in (result.kernel_exec_result.runtime_error or "")
    assert "memory_retry" in result.kernel_exec_result.metadata


def test_a_failure_that_is_not_about_memory_is_final_at_once(tmp_path: Path) -> None:
    result, attempts = run_with(tmp_path, [failure("IndexError: index 5 is out of bounds"),
                                           failure("unused")])
    assert len(attempts) == 1
    assert result.kernel_exec_result is not None
    assert "IndexError" in (result.kernel_exec_result.runtime_error or "")


@pytest.mark.parametrize(("message", "where", "expected"), [
    (OOM, "runtime_error", True), (SHARE, "runtime_error", True),
    ("ptxas error: CUDA_ERROR_OUT_OF_MEMORY while loading", "compilation_error", True),
    ("RuntimeError: shape mismatch", "runtime_error", False),
])
def test_which_failures_count_as_out_of_gpu_memory(message: str, where: str, expected: bool) -> None:
    assert _out_of_gpu_memory(failure(message, where)) is expected


def test_a_reference_out_of_memory_counts_too() -> None:
    result = WorkerResult(ref_exec_result=failure(OOM).kernel_exec_result,
                          kernel_exec_result=KernelExecResult(outcome=Outcome.NOT_RUN))
    assert _out_of_gpu_memory(result)
