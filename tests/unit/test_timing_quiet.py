"""Every timing on a GPU has it alone with the last job's processes gone. A worker may be
starting meanwhile, but only the step of its start that launches nothing on the GPU (its
context): the step that does waits at the GPU's gate (a neighbour's kernels slow a timing
without a trace in its cross-checks). A timing measured again, after its measures disagreed,
waits for starting workers too and lets none start."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from orchestration.executor import JobStep
from orchestration.worker_pool import PoolKey
from shared.models import KernelCode, WorkerJob
from tests.unit.conftest import gpu_executor

TIMING = {"timing": {"method": "cuda_event+l2_flush", "event_ms": [1.0], "device_busy_ms": 1.0}}


def stepped(key: PoolKey) -> JobStep:
    step = JobStep()
    step.key = key
    return step


def timed_job(tmp_path: Path) -> WorkerJob:
    return WorkerJob(job_id="t", kind="evaluate", device="cuda", gpu_id=0, num_trials=1,
                     kernel=KernelCode(source_code="x = 1", kernel_type="torch"),
                     cache_dir=str(tmp_path / "cache"))


def test_a_first_timing_waits_for_departing_workers_but_not_for_starting_ones(
        tmp_path: Path) -> None:
    ex = gpu_executor(tmp_path, spares_per_gpu=2)
    key = PoolKey(0)
    seen: dict[str, Any] = {}

    async def sampled_call(*_: Any) -> tuple[dict[str, Any], float]:
        seen.update(quiet=ex.workers._quiet.get(key, 0), starting=ex.workers._starting.get(key, 0),
                    departing=len(ex.workers._departing.get(key, ())),
                    alone=ex.gates[key].alone is not None)
        return TIMING, 5.0

    ex._sampled_call = sampled_call  # type: ignore[method-assign]
    job = timed_job(tmp_path)

    async def scenario() -> None:
        ex.workers._starting[key] = 1  # a spare creating its context: not waited for
        leaving = object()
        ex.workers._departing[key] = {leaving}  # the last job's worker, being torn down

        async def gone_soon() -> None:
            await asyncio.sleep(0.2)
            ex.workers._departing[key].discard(leaving)
        waiting = asyncio.create_task(gone_soon())
        await ex._time(job, None, stepped(key), "kernel")  # type: ignore[arg-type]
        await waiting

    asyncio.run(scenario())
    assert seen == {"quiet": 0, "starting": 1, "departing": 0, "alone": True}
    ex.workers.blocking.close()


def test_a_timing_measured_again_waits_for_starting_workers_and_none_starts_during_it(
        tmp_path: Path) -> None:
    ex = gpu_executor(tmp_path, spares_per_gpu=2)
    key = PoolKey(0)
    seen: list[dict[str, int]] = []
    # the device was busy 0.34 ms per call, the events saw 1 us: measured again
    disagreeing = {"timing": {"method": "cuda_event+l2_flush", "event_ms": [0.001],
                              "device_busy_ms": 0.34, "host_sync_ms": [0.36]}}

    async def sampled_call(*_: Any) -> tuple[dict[str, Any], float]:
        seen.append({"quiet": ex.workers._quiet.get(key, 0),
                     "starting": ex.workers._starting.get(key, 0)})
        return (disagreeing if len(seen) == 1 else TIMING), 5.0

    ex._sampled_call = sampled_call  # type: ignore[method-assign]
    job = timed_job(tmp_path)

    async def scenario() -> dict[str, Any]:
        ex.workers._starting[key] = 1

        async def up_soon() -> None:
            await asyncio.sleep(0.3)
            ex.workers._starting[key] = 0
        waiting = asyncio.create_task(up_soon())
        reply, _ = await ex._time(job, None, stepped(key), "kernel")  # type: ignore[arg-type]
        await waiting
        return reply

    reply = asyncio.run(scenario())
    assert seen == [{"quiet": 0, "starting": 1}, {"quiet": 1, "starting": 0}]
    assert "remeasured" in reply["timing"]
    ex.workers.blocking.close()


def test_a_short_job_waits_at_most_a_quarter_of_its_remaining_time(tmp_path: Path) -> None:
    ex = gpu_executor(tmp_path, spares_per_gpu=2)
    settles: list[float] = []

    async def departed(key: PoolKey, settle_s: float) -> None:
        settles.append(settle_s)

    async def sampled_call(*_: Any) -> tuple[dict[str, Any], float]:
        return TIMING, 5.0

    ex._sampled_call = sampled_call  # type: ignore[method-assign]
    ex.workers.departed = departed  # type: ignore[method-assign]
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
