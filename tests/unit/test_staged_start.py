"""A worker's start in two steps: its context anywhere, its first GPU work only inside the
GPU hold the executor gives the pool (the GPU's gate: never during a timing)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from orchestration.worker_pool import PoolKey, WorkerPool
from shared.settings import Settings


def cpu_pool(tmp_path: Path) -> WorkerPool:
    settings = Settings(job_dir=tmp_path / "jobs", job_store_path=tmp_path / "jobs.sqlite3",
                        build_cache_dir=tmp_path / "cache", ref_cache_dir=tmp_path / "refs",
                        spare_workers=False)
    return WorkerPool(settings, "cpu")


def test_a_starting_worker_gets_ready_only_once_the_gpu_hold_lets_it_in(tmp_path: Path) -> None:
    pool = cpu_pool(tmp_path)
    asked, release = asyncio.Event(), asyncio.Event()
    keys: list[PoolKey] = []

    @contextlib.asynccontextmanager
    async def hold(key: PoolKey) -> AsyncIterator[None]:
        keys.append(key)
        asked.set()
        await release.wait()  # another job's timing, say
        yield

    pool.gpu_hold = hold

    async def scenario() -> tuple[bool, bool, dict[str, float]]:
        try:
            starting = asyncio.create_task(pool.spawn(PoolKey(0)))
            await asyncio.wait_for(asked.wait(), 120)  # its context is made: it asks
            await asyncio.sleep(0.5)
            ready_while_held = starting.done()
            release.set()
            worker = await asyncio.wait_for(starting, 120)
            alive = worker.status is None
            await worker.close()
            return ready_while_held, alive, worker.startup
        finally:
            await pool.close()

    ready_while_held, alive, startup = asyncio.run(scenario())
    assert keys == [PoolKey(0)]
    assert not ready_while_held
    assert alive and startup["gpu_wait_ms"] >= 500


def test_a_cpu_worker_starts_without_asking_the_gpu_hold(tmp_path: Path) -> None:
    pool = cpu_pool(tmp_path)
    asked: list[PoolKey] = []

    @contextlib.asynccontextmanager
    async def hold(key: PoolKey) -> AsyncIterator[None]:
        asked.append(key)
        yield

    pool.gpu_hold = hold

    async def scenario() -> bool:
        try:
            worker = await asyncio.wait_for(pool.spawn(PoolKey(None)), 120)
            await worker.close()
            return worker.ready
        finally:
            await pool.close()

    assert asyncio.run(scenario())
    assert asked == []
