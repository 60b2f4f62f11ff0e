"""When the pool replaces the spares jobs took: all at once, once a third are missing."""

from __future__ import annotations

import asyncio
from pathlib import Path

from orchestration.executor import LocalExecutor
from shared.models import KernelCode, Outcome, WorkerJob
from tests.unit.conftest import cpu_executor

SLOW_IMPORT = (
    "import time\nimport torch\ntime.sleep(1.5)\n"
    "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x + 1\n"
)


def spares_seen_during_a_job(loop: asyncio.AbstractEventLoop, ex: LocalExecutor,
                             tmp_path: Path) -> tuple[int, int]:
    """(most spares ready or starting while the job ran, the same once it was over)."""
    job = WorkerJob(job_id="t", kind="evaluate", device="cpu", num_trials=1,
                    kernel=KernelCode(source_code=SLOW_IMPORT, kernel_type="torch"),
                    work_dir=str(tmp_path / "job"), cache_dir=str(tmp_path / "cache"))

    took_a_worker = asyncio.Event()

    async def progress(message: str, fraction: float) -> None:
        if message.startswith("compiling"):  # said once the job holds its worker
            took_a_worker.set()

    def spares() -> int:
        return ex.placement.workers.ready_count() + ex.placement.workers.starting_count()

    async def scenario() -> tuple[int, int]:
        deadline = loop.time() + 60
        while ex.placement.workers.ready_count() < 1 and loop.time() < deadline:  # the spare is up
            await asyncio.sleep(0.05)
        running = asyncio.ensure_future(ex.run(job, 60, progress))
        await asyncio.wait_for(took_a_worker.wait(), 30)  # importing the kernel: 1.5 s
        during = 0
        while not running.done():
            during = max(during, spares())
            await asyncio.sleep(0.05)
        result = running.result()
        assert result.kernel_exec_result is not None
        assert result.kernel_exec_result.outcome == Outcome.SUCCESS, result
        return during, spares()

    return loop.run_until_complete(scenario())


def test_a_pool_of_one_spare_replaces_it_while_the_job_that_took_it_runs(
        tmp_path: Path) -> None:
    """Real CPU executor: a third of one spare is one, so its replacement starts at once."""
    with cpu_executor(tmp_path / "state", spares_per_gpu=1) as (loop, ex):
        during, after = spares_seen_during_a_job(loop, ex, tmp_path)
    assert (during, after) == (1, 1)


def test_batch_refill_waits_until_a_third_are_missing_then_starts_them_all(
        tmp_path: Path) -> None:
    from collections import deque

    from orchestration.worker_pool import PoolKey, WorkerPool
    from shared.settings import Settings

    settings = Settings(job_dir=tmp_path / "jobs", spares_per_gpu=6)
    pool = WorkerPool(settings, "cuda")
    key = PoolKey(0)
    started: list[PoolKey] = []

    async def add_spare(k: PoolKey, warm: str | None) -> None:  # starting until the test says
        started.append(k)

    pool._add_spare = add_spare  # type: ignore[method-assign]

    async def scenario() -> list[int]:
        seen = []
        pool._ready[key] = deque(object() for _ in range(6))
        for _ in range(4):  # jobs take spares one by one
            pool._ready[key].popleft()
            pool.replenish(key)
            await asyncio.sleep(0)
            seen.append(len(started))
        waiter = asyncio.get_running_loop().create_future()
        pool._ready[key].clear()
        pool._starting[key] = 0
        pool._waiting[key] = deque([waiter])  # a job waiting gets its worker at once
        started.clear()
        pool.replenish(key)
        await asyncio.sleep(0)
        seen.append(len(started))
        return seen

    seen = asyncio.run(scenario())
    pool.blocking.close()
    assert seen == [0, 2, 2, 4, 7]  # nothing until 2 of 6 are gone; a waiter: 6 spares + its own
