"""The build stage's workers run a source's module code and nvcc beside other jobs' timings:
they run at the lowest CPU priority, for good (a nice limit of 0, so they cannot raise it back),
while a job's own workers keep the server's."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from orchestration.worker_pool import PoolKey, WorkerPool
from shared.settings import Settings
from worker_host.sandbox import BACKGROUND_NICE


def nice_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[16])


def nice_limit_of(pid: int) -> tuple[str, str]:
    with open(f"/proc/{pid}/limits") as f:
        line = next(line for line in f if line.startswith("Max nice priority"))
    soft, hard = line.split()[3:5]
    return soft, hard


def test_a_build_worker_runs_at_the_lowest_priority_and_a_job_worker_does_not(
        tmp_path: Path) -> None:
    settings = Settings(job_dir=tmp_path / "jobs", job_store_path=tmp_path / "jobs.sqlite3",
                        build_cache_dir=tmp_path / "cache", ref_cache_dir=tmp_path / "refs",
                        spares_per_gpu=1)

    async def scenario() -> dict[str, object]:
        pool = WorkerPool(settings, "cpu")
        try:
            builder = await pool.take(PoolKey(None, build=True))
            worker = await pool.take(PoolKey(None))
            assert builder.pid is not None and worker.pid is not None
            seen = {"builder": nice_of(builder.pid), "builder_limit": nice_limit_of(builder.pid),
                    "worker": nice_of(worker.pid)}
            builder.kill()
            worker.kill()
            return seen
        finally:
            await pool.close()

    seen = asyncio.run(scenario())
    assert seen["builder"] == BACKGROUND_NICE, seen
    assert seen["builder_limit"] == ("0", "0"), seen
    assert seen["worker"] == os.getpriority(os.PRIO_PROCESS, 0), seen
