"""A GPU's previous job's workers are waited for (WorkerPool.depart/departed) before a
reference is timed, so their contexts' teardown, and whatever they left running, is over."""

from __future__ import annotations

import asyncio
from pathlib import Path

from orchestration.worker_pool import PoolKey, WorkerPool
from shared.settings import Settings


class Leaving:
    """A killed worker whose process is reaped when ``reaped`` is set."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.reaped = asyncio.Event()

    async def exit_status(self, timeout: float = 10.0) -> int | None:
        await self.reaped.wait()
        self.status = 9
        return self.status


def pool(tmp_path: Path) -> WorkerPool:
    return WorkerPool(Settings.from_env({"JOB_DIR": str(tmp_path)}), "cpu")


def test_departed_returns_once_every_departing_worker_of_the_gpu_is_gone(tmp_path: Path) -> None:
    async def scenario() -> None:
        workers = pool(tmp_path)
        gpu0, gpu1 = PoolKey(0), PoolKey(1)
        first, second, other = Leaving(), Leaving(), Leaving()
        workers.depart(gpu0, [first, second])  # type: ignore[list-item]
        workers.depart(gpu1, [other])  # type: ignore[list-item]
        waiting = asyncio.create_task(workers.departed(gpu0, 5.0))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        first.reaped.set()
        await asyncio.sleep(0.05)
        assert not waiting.done()  # one of the job's workers is still being torn down
        second.reaped.set()
        await asyncio.wait_for(waiting, 1.0)  # the other GPU's departing worker does not count
        other.reaped.set()
        await workers.close()

    asyncio.run(scenario())


def test_departed_is_woken_by_the_last_departure_not_by_a_timer(tmp_path: Path) -> None:
    """The next timing starts as the last process goes: a few turns of the event loop after
    it is reaped, with no clock involved (a poll would sleep through them)."""
    async def scenario() -> None:
        workers = pool(tmp_path)
        leaving = Leaving()
        workers.depart(PoolKey(0), [leaving])  # type: ignore[list-item]
        waiting = asyncio.create_task(workers.departed(PoolKey(0), 60.0))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not waiting.done()
        leaving.reaped.set()
        for _ in range(20):
            await asyncio.sleep(0)
        assert waiting.done()
        await workers.close()

    asyncio.run(scenario())


def test_departed_gives_up_after_its_wait_and_ignores_workers_already_gone(tmp_path: Path) -> None:
    async def scenario() -> None:
        workers = pool(tmp_path)
        stuck, gone = Leaving(), Leaving()
        gone.status = 0
        workers.depart(PoolKey(0), [gone])  # type: ignore[list-item]
        await asyncio.wait_for(workers.departed(PoolKey(0), 5.0), 0.5)
        workers.depart(PoolKey(0), [stuck])  # type: ignore[list-item]
        loop = asyncio.get_running_loop()
        began = loop.time()
        await workers.departed(PoolKey(0), 0.1)
        assert loop.time() - began >= 0.1
        stuck.reaped.set()
        await workers.close()

    asyncio.run(scenario())


def test_a_worker_is_gone_once_its_sandbox_reports_the_jobs_exit_not_when_the_sandbox_exits(
        tmp_path: Path) -> None:
    """The sandbox's own exit (a fork of the zygote unmapping its imports) comes after the
    job's namespace is empty; a timing waiting for departures waits for the job only."""
    import os
    import socket

    from orchestration.worker import BlockingCalls, Worker
    from shared.channel import Channel
    from shared.protocol import Exited

    async def scenario() -> int | None:
        ours, sandbox = socket.socketpair()
        job_ours, job_theirs = socket.socketpair()
        out_read, out_write = os.pipe()
        blocking = BlockingCalls(4)
        worker = Worker(Channel(ours), Channel(job_ours), out_read, tmp_path, blocking)
        watch = asyncio.create_task(worker._watch())
        Channel(sandbox).send(Exited(status=9, max_rss_bytes=1))  # the sandbox stays up
        status = await asyncio.wait_for(worker.exit_status(timeout=1.0), 3.0)
        assert not watch.done()  # still reading the sandbox's control channel
        sandbox.close()
        await asyncio.wait_for(watch, 5.0)
        for end in (job_theirs, job_ours):
            end.close()
        os.close(out_read)
        os.close(out_write)
        blocking.close()
        return status

    assert asyncio.run(scenario()) == 9
