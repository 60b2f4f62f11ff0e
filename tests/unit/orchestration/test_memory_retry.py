"""A job that ran out of GPU memory runs once more with the GPU to itself (the last job's
processes gone, no worker starting), and only the second attempt's verdict stands; other
failures are final at once."""

from __future__ import annotations

import asyncio
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from orchestration.executor import LocalExecutor
from orchestration.facts import (
    Evaluated,
    Facts,
    Failed,
    Held,
    KernelProcess,
    ProcessSetup,
    Where,
)
from orchestration.gpu_pool import Slot
from orchestration.job_step import Side
from orchestration.placement import LocalSeat
from orchestration.worker_pool import PoolKey
from shared.models import GPUInfo, KernelCode, Outcome, WorkerJob, WorkerResult
from shared.protocol import Failure, Resources
from shared.settings import Settings

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB.\n"
       "the problem does not fit on this GPU: 5 bytes free of 80")


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

    async def output_drained(self, timeout: float = 2.0) -> None:
        return None

    async def close(self) -> None:
        self.closed = True


def job(tmp_path: Path) -> WorkerJob:
    return WorkerJob(job_id="j", kind="evaluate", device="cuda",
                     kernel=KernelCode(source_code="x = 1", kernel_type="torch"),
                     cache_dir=str(tmp_path / "cache"))


def failure(message: str, out_of_memory: bool = True) -> Failed:
    return Failed(Side.ALONE, Failure(outcome=Outcome.RUNTIME_ERROR, message=message,
                                      out_of_memory=out_of_memory))


def ran() -> Evaluated:
    where = Where("cuda", "NVIDIA H100 80GB HBM3", 0)
    return Evaluated(process=KernelProcess(where, {}, ProcessSetup(None, None)), outputs=[],
                     held=Held(Resources(), 0, 0), timed=None, jit_cache=None)


def run_with(tmp_path: Path, verdicts: list[Facts], spares: list[FakeWorker] | None = None
             ) -> tuple[WorkerResult, list[dict[str, Any]]]:
    """Run a job whose flow finds ``verdicts`` in turn, with ``spares`` ready; what each
    attempt saw."""
    attempts: list[dict[str, Any]] = []
    box: dict[str, LocalExecutor] = {}

    async def flow(job: WorkerJob, seat: LocalSeat) -> Facts:
        workers = box["ex"].placement.workers
        worker = FakeWorker()
        attempts.append({"held_before": list(seat.held), "worker": worker,
                         "quiet": workers._quiet.get(PoolKey(0), 0),
                         "ready": len(workers._ready.get(PoolKey(0), ()))})
        seat.held.append(worker)  # type: ignore[arg-type]
        return verdicts[len(attempts) - 1]

    settings = Settings(job_dir=tmp_path / "jobs", job_store_path=tmp_path / "jobs.sqlite3",
                        build_cache_dir=tmp_path / "cache", ref_cache_dir=tmp_path / "refs",
                        spares_per_gpu=0)
    ex = LocalExecutor(settings, "cuda", [Slot(0, 0)],
                       [GPUInfo(id=0, name="NVIDIA H100 80GB HBM3", memory_total_mb=81559)],
                       flows={"evaluate": flow})
    box["ex"] = ex
    if spares:
        ex.placement.workers._ready[PoolKey(0)] = deque(spares)  # type: ignore[arg-type]

    async def progress(_: str, __: float) -> None:
        return None

    async def scenario() -> WorkerResult:
        result = await ex.run(job(tmp_path), 60.0, progress)
        await ex.close()
        return result

    return asyncio.run(scenario()), attempts


def test_a_job_out_of_gpu_memory_runs_again_on_a_quiet_gpu_and_its_second_verdict_stands(
        tmp_path: Path) -> None:
    spares = [FakeWorker(), FakeWorker()]
    result, attempts = run_with(tmp_path, [failure(OOM), ran()], spares)
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
    result, attempts = run_with(tmp_path, [failure("IndexError: index 5 is out of bounds", False),
                                           failure("unused")])
    assert len(attempts) == 1
    assert result.kernel_exec_result is not None
    assert "IndexError" in (result.kernel_exec_result.runtime_error or "")


def _does_not_fit() -> Exception:
    from harness.arena import DoesNotFit

    return DoesNotFit("the inputs do not fit", 10, 1)


def _caused_by_oom() -> Exception:
    import torch

    try:
        try:
            raise torch.OutOfMemoryError("CUDA out of memory")
        except torch.OutOfMemoryError as inner:
            raise RuntimeError("the kernel failed") from inner
    except RuntimeError as outer:
        return outer


@pytest.mark.parametrize(("make", "expected"), [
    (lambda: __import__("torch").OutOfMemoryError("CUDA out of memory. Tried to allocate"), True),
    (lambda: RuntimeError("ptxas error: CUDA_ERROR_OUT_OF_MEMORY while loading"), True),
    (_does_not_fit, True),
    (_caused_by_oom, True),
    (lambda: RuntimeError("shape mismatch"), False),
])
def test_which_failures_the_worker_counts_as_out_of_gpu_memory(make: Any, expected: bool) -> None:
    from harness.failures import classify

    assert classify(make(), "cpu").out_of_memory is expected
