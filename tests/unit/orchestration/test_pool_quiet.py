"""WorkerPool.quiet: no worker starts for a GPU while one of its timings is re-measured."""

from __future__ import annotations

import asyncio
from pathlib import Path

from orchestration.worker_pool import PoolKey, WorkerPool
from shared.settings import Settings


def pool_recording_spawns(tmp_path: Path) -> tuple[WorkerPool, list[PoolKey]]:
    settings = Settings(job_dir=tmp_path / "jobs", job_store_path=tmp_path / "jobs.sqlite3",
                        build_cache_dir=tmp_path / "cache", ref_cache_dir=tmp_path / "refs",
                        spares_per_gpu=2)
    pool = WorkerPool(settings, "cpu")
    started: list[PoolKey] = []

    def record(coro: object) -> None:
        coro.close()  # type: ignore[attr-defined]  # the _add_spare coroutine, never run
        started.append(key)

    key = PoolKey(0)
    pool._background = record  # type: ignore[method-assign]
    return pool, started


def test_no_spare_starts_while_quiet_and_the_missing_ones_start_after(tmp_path: Path) -> None:
    pool, started = pool_recording_spawns(tmp_path)
    key = PoolKey(0)

    async def scenario() -> tuple[int, int]:
        async with pool.quiet(key, settle_s=0.1):
            pool.replenish(key)
            during = len(started)
        return during, len(started)

    during, after = asyncio.run(scenario())
    assert (during, after) == (0, 2)
    pool.blocking.close()


def test_quiet_waits_for_starting_workers_but_only_up_to_its_limit(tmp_path: Path) -> None:
    pool, _ = pool_recording_spawns(tmp_path)
    key = PoolKey(0)
    pool._starting[key] = 1

    async def scenario() -> tuple[bool, bool]:
        entered = asyncio.Event()

        async def quiet() -> None:
            async with pool.quiet(key, settle_s=5.0):
                entered.set()

        task = asyncio.create_task(quiet())
        await asyncio.sleep(0.1)
        waited = not entered.is_set()
        pool._starting[key] = 0  # the starting worker is up
        await asyncio.wait_for(task, 2)
        return waited, entered.is_set()

    assert asyncio.run(scenario()) == (True, True)
    pool.blocking.close()


def test_while_quiet_a_waiting_job_gets_only_its_own_worker_started(tmp_path: Path) -> None:
    pool, started = pool_recording_spawns(tmp_path)
    key = PoolKey(0)

    async def scenario() -> tuple[int, int]:
        async with pool.quiet(key, settle_s=0.0):
            taking = asyncio.create_task(pool.take(key))  # no worker ready: it waits
            await asyncio.sleep(0.05)
            during = len(started)
            taking.cancel()
        return during, len(started)

    during, after = asyncio.run(scenario())
    assert during == 1  # the job's worker, not the two spares besides
    assert after >= 2
    pool.blocking.close()
