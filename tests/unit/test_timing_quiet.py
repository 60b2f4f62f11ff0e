"""Every timing on a GPU is made with its spares settled: no worker starts while a side is
timed, and one still starting is waited for first (a CUDA context created beside a timing
slows it without a trace in its cross-checks)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from orchestration.executor import JobStep
from orchestration.worker_pool import PoolKey
from profiling import integrity
from shared.models import KernelCode, WorkerJob
from tests.unit.conftest import gpu_executor

TIMING = {"timing": {"method": "cuda_event+l2_flush", "event_ms": [1.0], "device_busy_ms": 1.0}}


def timed_job(tmp_path: Path) -> WorkerJob:
    return WorkerJob(job_id="t", kind="evaluate", device="cuda", gpu_id=0, num_trials=1,
                     kernel=KernelCode(source_code="x = 1", kernel_type="torch"),
                     cache_dir=str(tmp_path / "cache"))


def test_a_timing_waits_for_starting_workers_and_none_starts_during_it(tmp_path: Path) -> None:
    ex = gpu_executor(tmp_path, spares_per_gpu=2)
    key = PoolKey(0)
    seen: dict[str, Any] = {}

    async def sampled_call(*_: Any) -> tuple[dict[str, Any], float]:
        seen.update(quiet=ex.workers._quiet.get(key, 0), starting=ex.workers._starting.get(key, 0))
        return TIMING, 5.0

    ex._sampled_call = sampled_call  # type: ignore[method-assign]
    job = timed_job(tmp_path)

    async def scenario() -> None:
        ex.workers._starting[key] = 1  # a spare creating its context

        async def up_soon() -> None:
            await asyncio.sleep(0.2)
            ex.workers._starting[key] = 0
        waiting = asyncio.create_task(up_soon())
        await ex._time(job, None, JobStep(), "kernel")  # type: ignore[arg-type]
        await waiting

    asyncio.run(scenario())
    assert seen == {"quiet": 1, "starting": 0}
    ex.workers.blocking.close()


def test_a_short_job_waits_at_most_a_quarter_of_its_remaining_time(tmp_path: Path) -> None:
    ex = gpu_executor(tmp_path, spares_per_gpu=2)
    settles: list[float] = []

    @contextlib.asynccontextmanager
    async def quiet(key: PoolKey, settle_s: float) -> AsyncIterator[None]:
        settles.append(settle_s)
        yield

    async def sampled_call(*_: Any) -> tuple[dict[str, Any], float]:
        return TIMING, 5.0

    ex._sampled_call = sampled_call  # type: ignore[method-assign]
    ex.workers.quiet = quiet  # type: ignore[method-assign]
    job = timed_job(tmp_path)

    async def scenario() -> None:
        for left in (4.0, 600.0):
            step = JobStep()
            step.deadline = time.monotonic() + left
            await ex._time(job, None, step, "kernel")  # type: ignore[arg-type]

    asyncio.run(scenario())
    assert len(settles) == 2
    assert 0.9 <= settles[0] <= 1.0  # a quarter of the 4 s left
    assert settles[1] == pytest.approx(10.0, abs=0.05)  # a long job: the full settle
    ex.workers.blocking.close()


def test_a_host_bound_reading_is_measured_again_and_the_second_reading_stands(
        tmp_path: Path) -> None:
    """A 5 us kernel whose host interval read 0.115 ms once (the host busy for a moment) is
    not reported at 0.115 ms: the second reading, on a settled GPU, stands."""
    ex = gpu_executor(tmp_path, spares_per_gpu=2)
    replies = [
        {"timing": {"method": "cuda_event+l2_flush", "event_ms": [0.0045],
                    "device_busy_ms": 0.0040, "host_sync_ms": [0.115]}},
        {"timing": {"method": "cuda_event+l2_flush", "event_ms": [0.0045],
                    "device_busy_ms": 0.0040, "host_sync_ms": [0.03]}},
    ]
    calls: list[int] = []

    async def sampled_call(*_: Any) -> tuple[dict[str, Any], float]:
        calls.append(1)
        return replies[len(calls) - 1], 5.0

    ex._sampled_call = sampled_call  # type: ignore[method-assign]
    job = timed_job(tmp_path)
    reply, _ = asyncio.run(ex._time(job, None, JobStep(), "kernel"))  # type: ignore[arg-type]
    assert len(calls) == 2
    assert reply["timing"]["remeasured"].startswith("host-bound")
    verdict = integrity.assess(reply["timing"], 1, "cuda")
    assert not verdict.host_bound and verdict.stats.median == pytest.approx(0.0045)
    ex.workers.blocking.close()
