"""A fork server (zygote) that does not start leaves no process behind: not one that failed,
not one still starting when the server closes."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest

from orchestration.worker_pool import PoolKey, WorkerPool
from orchestration.zygotes import ZygoteError
from shared.settings import Settings


def pool_with(tmp_path: Path, program: str) -> WorkerPool:
    """A CPU pool whose 'python' is ``program`` (a shell script given the zygote's arguments)."""
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\n{program}\n")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    settings = Settings(job_dir=tmp_path / "jobs", job_store_path=tmp_path / "jobs.sqlite3",
                        build_cache_dir=tmp_path / "cache", ref_cache_dir=tmp_path / "refs",
                        python_executable=str(python))
    return WorkerPool(settings, "cpu")


def children() -> set[int]:
    """This process's child processes, zombies included."""
    mine = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == os.getpid():
                        mine.add(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return mine


def test_a_zygote_that_exits_at_once_is_reported_and_reaped(tmp_path: Path) -> None:
    pool = pool_with(tmp_path, "exit 3")
    before = children()

    async def scenario() -> None:
        with pytest.raises(ZygoteError, match="did not start"):
            await pool.zygote(PoolKey(None))
        await pool.close()

    asyncio.run(scenario())
    assert children() - before == set()


def test_a_zygote_still_starting_when_the_pool_closes_is_killed_and_reaped(
        tmp_path: Path) -> None:
    pool = pool_with(tmp_path, "exec sleep 60")
    before = children()

    async def scenario() -> set[int]:
        starting = asyncio.create_task(pool.zygote(PoolKey(None)))
        while not children() - before:  # the zygote's process is up, saying nothing
            await asyncio.sleep(0.01)
        started = children() - before
        await pool.close()
        with pytest.raises(asyncio.CancelledError):
            await starting
        return started

    started = asyncio.run(scenario())
    assert started and children() - before == set()
