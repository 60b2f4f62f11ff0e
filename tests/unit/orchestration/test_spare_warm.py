"""What a GPU worker warms before its job. A job whose source may multiply matrices takes a
spare that warmed cuBLAS and the others one that did not. A job that runs its kernel alone (/evaluate,
/validate) takes a spare that rehearsed only that path, the others one that rehearsed a
comparison too. The refill follows what the jobs took; the worker warms what its environment
names."""

from __future__ import annotations

import asyncio
import sys
import types
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from harness.process import prepare_process
from orchestration.worker_kinds import Needs, Warm, uses_cublas
from orchestration.worker_pool import PoolKey, WorkerPool
from shared.protocol import (
    REHEARSE_ALL,
    REHEARSE_ALONE,
    REHEARSE_ENV,
    SPARE_WARM_ENV,
    WARM_BASE,
    WARM_CUBLAS,
    WARM_NONE,
)
from shared.settings import Settings


@pytest.mark.parametrize("source", [
    "return x @ x.t()",
    "y = (a)@b",
    "return torch.matmul(a, b)",
    "return torch.bmm(x, x)",
    "torch.addmm(bias, x, w)",
    "self.fc = nn.Linear(128, 64)",
    "return F.linear(x, w)",
    "torch.einsum('ij,jk->ik', a, b)",
    "q = F.scaled_dot_product_attention(q, k, v)",
    "self.conv = nn.Conv2d(3, 16, 3)",
    "cublasSgemm(handle, ...);",
    "torch.linalg.solve(a, b)",
    None,
])
def test_a_source_that_may_multiply_matrices_may_call_cublas(source: str | None) -> None:
    assert uses_cublas(source)


@pytest.mark.parametrize("source", [
    ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
     "        return torch.relu(x)\n"),
    "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x_ptr):\n    pass\n",
    ("class M(torch.nn.Module):\n    @torch.no_grad()\n    def forward(self, x):\n"
     "        return x.sum(dim=0)\n"),
])
def test_elementwise_reductions_and_decorators_do_not_call_cublas(source: str) -> None:
    assert not uses_cublas(source)


def test_what_a_gpu_worker_warms_follows_the_jobs_source(tmp_path: Path) -> None:
    gpu = WorkerPool(Settings(job_dir=tmp_path / "jobs"), "cuda")
    cpu = WorkerPool(Settings(job_dir=tmp_path / "cpu"), "cpu")
    try:
        assert gpu.warm(PoolKey(0), Needs(cublas=True)) == Warm(WARM_CUBLAS)
        assert gpu.warm(PoolKey(0), Needs(cublas=False)) == Warm(WARM_BASE)
        assert gpu.warm(PoolKey(0), Needs(cublas=False, alone=True)) == Warm(WARM_BASE, alone=True)
        assert gpu.zygote_env(PoolKey(0))[SPARE_WARM_ENV] == WARM_CUBLAS
        assert gpu.zygote_env(PoolKey(0))[REHEARSE_ENV] == REHEARSE_ALL
        assert gpu.warm(PoolKey(None, build=True), Needs()) is None
        assert SPARE_WARM_ENV not in gpu.zygote_env(PoolKey(None, build=True))
        assert cpu.warm(PoolKey(None), Needs()) is None
        assert SPARE_WARM_ENV not in cpu.zygote_env(PoolKey(None))
        assert REHEARSE_ENV not in cpu.zygote_env(PoolKey(None))
    finally:
        gpu.blocking.close()
        cpu.blocking.close()


class Spare:
    def __init__(self, warmed: Warm | None) -> None:
        self.warmed = warmed
        self.queues = "1"
        self.status = None
        self._gone = asyncio.Event()


def auto_pool(tmp_path: Path, spares: int) -> tuple[WorkerPool, list[Warm | None]]:
    """A GPU pool whose spares are made at once (with so few, each taken one is replaced at
    once), recording what each warmed."""
    pool = WorkerPool(Settings(job_dir=tmp_path / "jobs", spares_per_gpu=spares), "cuda")
    started: list[Warm | None] = []

    async def spawn(key: PoolKey, queues: str | None = None, warm: Warm | None = None) -> Any:
        started.append(warm)
        return Spare(warm)

    pool.spawn = spawn  # type: ignore[method-assign]
    return pool, started


def test_a_job_takes_a_spare_warmed_as_its_source_needs_and_the_refill_replaces_that_kind(
        tmp_path: Path) -> None:
    pool, started = auto_pool(tmp_path, spares=2)
    key = PoolKey(0)

    async def scenario() -> tuple[list[Warm | None], list[Any]]:
        pool.replenish(key)  # the first fill: with and without cuBLAS, rehearsing everything
        for _ in range(5):
            await asyncio.sleep(0)
        first = [w.warmed for w in pool._ready[key]]
        started.clear()
        taken = []
        for needs in (Needs(cublas=False, alone=True), Needs(cublas=True),
                      Needs(cublas=False, alone=True)):
            taken.append(await pool.take(key, needs))
            for _ in range(5):
                await asyncio.sleep(0)
        return first, taken

    first, taken = asyncio.run(scenario())
    pool.blocking.close()
    assert first == [Warm(WARM_CUBLAS), Warm(WARM_BASE)]
    # an /evaluate first takes the spare that covers it; its replacement is made for it
    assert [w.warmed for w in taken] == [Warm(WARM_BASE), Warm(WARM_CUBLAS),
                                         Warm(WARM_BASE, alone=True)]
    assert started == [Warm(WARM_BASE, alone=True), Warm(WARM_CUBLAS),
                       Warm(WARM_BASE, alone=True)]  # each taken spare replaced by its kind


def test_with_none_of_its_kind_ready_a_job_takes_another_and_the_refill_makes_its_kind(
        tmp_path: Path) -> None:
    pool, started = auto_pool(tmp_path, spares=2)
    key = PoolKey(0)
    pool._ready[key] = deque([Spare(Warm(WARM_BASE)), Spare(Warm(WARM_BASE))])  # type: ignore[misc]

    async def scenario() -> Any:
        taken = await pool.take(key, Needs(cublas=True))
        for _ in range(5):
            await asyncio.sleep(0)
        return taken

    taken = asyncio.run(scenario())
    pool.blocking.close()
    assert taken.warmed == Warm(WARM_BASE)  # no job waits for a kind: its first matmul is cold
    assert started == [Warm(WARM_CUBLAS)]  # the mix moves toward what the jobs ask


@pytest.mark.parametrize(("ready", "needs", "taken"), [
    # a kernel alone: one that rehearsed a comparison too serves it, cold for nothing
    ([Warm(WARM_BASE), Warm(WARM_CUBLAS, alone=True)], Needs(cublas=True, alone=True),
     Warm(WARM_CUBLAS, alone=True)),
    ([Warm(WARM_BASE), Warm(WARM_CUBLAS)], Needs(cublas=False, alone=True), Warm(WARM_BASE)),
    # of those that cover it, the lightest: its exit is what the next timing waits for
    ([Warm(WARM_CUBLAS), Warm(WARM_CUBLAS, alone=True), Warm(WARM_BASE)],
     Needs(cublas=False, alone=True), Warm(WARM_BASE, alone=False)),
    ([Warm(WARM_CUBLAS), Warm(WARM_CUBLAS, alone=True)], Needs(cublas=False, alone=True),
     Warm(WARM_CUBLAS, alone=True)),
    # a comparison's process: one that rehearsed only a kernel alone does not cover it
    ([Warm(WARM_CUBLAS, alone=True), Warm(WARM_CUBLAS)], Needs(cublas=False), Warm(WARM_CUBLAS)),
    # nothing covers it: the first ready
    ([Warm(WARM_BASE, alone=True), Warm(WARM_NONE)], Needs(cublas=True),
     Warm(WARM_BASE, alone=True)),
])
def test_with_none_of_its_kind_ready_a_job_takes_one_that_warmed_more_before_any_other(
        tmp_path: Path, ready: list[Warm], needs: Needs, taken: Warm) -> None:
    pool, _ = auto_pool(tmp_path, spares=2)
    key = PoolKey(0)
    pool._ready[key] = deque(Spare(w) for w in ready)  # type: ignore[misc]
    worker = asyncio.run(pool.take(key, needs))
    pool.blocking.close()
    assert worker.warmed == taken


def test_a_spare_is_told_what_to_warm_and_rehearse_through_its_environment() -> None:
    assert Warm(WARM_BASE, alone=True).env() == {SPARE_WARM_ENV: WARM_BASE,
                                                  REHEARSE_ENV: REHEARSE_ALONE}
    assert Warm(WARM_CUBLAS).env() == {SPARE_WARM_ENV: WARM_CUBLAS, REHEARSE_ENV: REHEARSE_ALL}


class FakeTorch(types.ModuleType):
    """Records the GPU work ``prepare_process`` asks for."""

    def __init__(self) -> None:
        super().__init__("torch")
        self.made: list[str] = []
        self.cuda: Any = types.SimpleNamespace(init=lambda: self.made.append("context"),
                                               synchronize=lambda: None)
        self.float32, self.float16, self.bfloat16 = "fp32", "fp16", "bf16"

    def zeros(self, *args: Any, **kwargs: Any) -> None:
        self.made.append("zeros")

    def manual_seed(self, seed: int) -> None:
        self.made.append("seed")

    def randn(self, *args: Any, **kwargs: Any) -> Any:
        made = self.made

        class Matrix:
            dtype = "fp32"

            def to(self, dtype: str) -> Any:
                self.dtype = dtype
                made.append(f"cast {dtype}")
                return self

            def __matmul__(self, other: Any) -> Any:
                made.append(f"matmul {self.dtype}")
                return self

            def sum(self) -> Any:
                return types.SimpleNamespace(item=lambda: 0)

        return Matrix()


@pytest.mark.parametrize(("warm", "casts", "matmuls"), [
    (WARM_CUBLAS, ["fp32", "fp16", "bf16"], ["fp32", "fp16", "bf16"]),
    (WARM_BASE, ["fp32", "fp16", "bf16"], []),
    (WARM_NONE, [], []),
    (None, ["fp32", "fp16", "bf16"], ["fp32", "fp16", "bf16"]),
])
def test_a_gpu_worker_warms_what_its_environment_names(
        monkeypatch: pytest.MonkeyPatch, warm: str | None, casts: list[str],
        matmuls: list[str]) -> None:
    torch = FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    if warm is None:
        monkeypatch.delenv(SPARE_WARM_ENV, raising=False)
    else:
        monkeypatch.setenv(SPARE_WARM_ENV, warm)
    prepare_process("cuda")
    assert torch.made[0] == "context"
    assert [m.split()[1] for m in torch.made if m.startswith("cast")] == casts
    assert [m.split()[1] for m in torch.made if m.startswith("matmul")] == matmuls
    if not casts:
        assert "zeros" in torch.made  # the context is made all the same


def test_a_worker_that_becomes_ready_goes_to_the_first_job_waiting_for_its_kind(
        tmp_path: Path) -> None:
    pool = WorkerPool(Settings(job_dir=tmp_path / "jobs", spares_per_gpu=0), "cuda")
    key = PoolKey(0)
    pool.replenish = lambda k: None  # type: ignore[method-assign]  # the test starts them

    async def spawn(k: PoolKey, queues: str | None = None, warm: Warm | None = None) -> Any:
        return Spare(warm)

    pool.spawn = spawn  # type: ignore[method-assign]

    async def scenario() -> tuple[Any, Any]:
        matmul = asyncio.ensure_future(pool.take(key, Needs(cublas=True)))  # first in line
        plain = asyncio.ensure_future(pool.take(key, Needs(cublas=False)))
        await asyncio.sleep(0)
        for warm in (Warm(WARM_BASE), Warm(WARM_CUBLAS)):
            pool._starting[key] = pool._starting.get(key, 0) + 1
            await pool._add_spare(key, warm)
        return await matmul, await plain

    matmul, plain = asyncio.run(scenario())
    pool.blocking.close()
    assert matmul.warmed == Warm(WARM_CUBLAS) and plain.warmed == Warm(WARM_BASE)
