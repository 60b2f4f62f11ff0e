"""Hardware work queues (CUDA_DEVICE_MAX_CONNECTIONS): the spares make one, a job whose source
may use several streams gets a worker made for it with CUDA's default, and an operator's own
setting stands for every worker."""

from __future__ import annotations

import asyncio
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from orchestration.worker_kinds import (
    CUDA_DEFAULT_QUEUES,
    ONE_QUEUE,
    QUEUES_ENV,
    Needs,
    Warm,
    uses_streams,
)
from orchestration.worker_pool import PoolKey, WorkerPool
from shared.settings import Settings


@pytest.mark.parametrize("source", [
    "s = torch.cuda.Stream()\nwith torch.cuda.stream(s):\n    y = x * 2",
    "cudaStream_t side; cudaStreamCreate(&side);",
    "g = torch.cuda.CUDAGraph()",
    "stream = cupy.cuda.Stream(non_blocking=True)",
    "at::cuda::getStreamFromPool()",
])
def test_a_source_that_names_a_stream_or_a_graph_may_use_several_streams(source: str) -> None:
    assert uses_streams(source)


def test_a_plain_kernel_does_not_use_streams() -> None:
    assert not uses_streams("import torch\nclass Model(torch.nn.Module):\n"
                            "    def forward(self, x):\n        return torch.relu(x)\n")
    assert not uses_streams(None)


class Spawned:
    def __init__(self, queues: str | None, warmed: Warm | None = None) -> None:
        self.queues = queues
        self.warmed = warmed
        self.status = None
        self._gone = asyncio.Event()


def pool_with_fake_spawns(tmp_path: Path) -> tuple[WorkerPool, list[str | None]]:
    pool = WorkerPool(Settings(job_dir=tmp_path / "jobs", spares_per_gpu=2), "cuda")
    made: list[str | None] = []

    async def spawn(key: PoolKey, queues: str | None = None, warm: Warm | None = None) -> Any:
        made.append(queues)
        return Spawned(queues or pool.queues(key), warm)

    pool.spawn = spawn  # type: ignore[method-assign]
    pool.replenish = lambda key: None  # type: ignore[method-assign]
    return pool, made


def test_spares_have_one_queue_and_a_streams_job_gets_a_worker_made_with_cudas_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(QUEUES_ENV, raising=False)
    pool, made = pool_with_fake_spawns(tmp_path)
    key = PoolKey(0)
    spare = Spawned(ONE_QUEUE)
    pool._ready[key] = deque([spare])  # type: ignore[list-item]

    async def scenario() -> tuple[Any, Any]:
        wide = await pool.take(key, Needs(streams=True))
        plain = await pool.take(key)
        return wide, plain

    wide, plain = asyncio.run(scenario())
    pool.blocking.close()
    assert made == [CUDA_DEFAULT_QUEUES]  # only the streams job's worker was made for it
    assert wide.queues == CUDA_DEFAULT_QUEUES
    assert plain is spare and plain.queues == ONE_QUEUE
    assert pool.zygote_env(key)[QUEUES_ENV] == ONE_QUEUE


def test_an_operators_setting_stands_for_every_worker(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(QUEUES_ENV, "4")
    pool, made = pool_with_fake_spawns(tmp_path)
    key = PoolKey(0)
    spare = Spawned("4")
    pool._ready[key] = deque([spare])  # type: ignore[list-item]
    taken = asyncio.run(pool.take(key, Needs(streams=True)))
    pool.blocking.close()
    assert taken is spare and made == []
    assert pool.queues(key, streams=True) == pool.queues(key) == "4"
    assert pool.zygote_env(key)[QUEUES_ENV] == "4"


def test_cpu_workers_have_no_queues_to_choose(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(QUEUES_ENV, raising=False)
    pool = WorkerPool(Settings(job_dir=tmp_path / "jobs"), "cpu")
    assert pool.queues(PoolKey(None), streams=True) is None
    assert QUEUES_ENV not in pool.zygote_env(PoolKey(None))
    pool.blocking.close()


def test_a_worker_made_for_a_streams_job_is_counted_as_starting_but_not_as_a_spare(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(QUEUES_ENV, raising=False)
    pool = WorkerPool(Settings(job_dir=tmp_path / "jobs", spares_per_gpu=3), "cuda")
    key = PoolKey(0)
    release = asyncio.Event()
    spares_started: list[PoolKey] = []

    async def spawn(k: PoolKey, queues: str | None = None, warm: str | None = None) -> Any:
        await release.wait()
        return Spawned(queues)

    async def add_spare(k: PoolKey, warm: str | None) -> None:
        spares_started.append(k)

    pool.spawn = spawn  # type: ignore[method-assign]
    pool._add_spare = add_spare  # type: ignore[method-assign]

    async def scenario() -> tuple[int, int]:
        pool._ready[key] = deque([Spawned(ONE_QUEUE), Spawned(ONE_QUEUE)])  # type: ignore[list-item]
        wide = asyncio.ensure_future(pool.take(key, Needs(streams=True)))
        await asyncio.sleep(0)
        starting = pool.starting_count()
        pool.replenish(key)  # one of three spares missing: a third, so one starts
        await asyncio.sleep(0)
        release.set()
        await wide
        return starting, len(spares_started)

    starting, started = asyncio.run(scenario())
    pool.blocking.close()
    assert starting == 1
    assert started == 1
