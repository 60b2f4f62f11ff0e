"""SPARE_WARM: what a GPU worker warms before its job. Under ``auto`` (the default) a job whose
source may multiply matrices takes a spare that warmed cuBLAS and the others one that did not,
and the refill follows what the jobs took; ``cublas`` and ``none`` make every spare alike. The
worker warms what its environment names."""

from __future__ import annotations

import asyncio
import sys
import types
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from harness.process import prepare_process
from orchestration.worker_pool import Needs, PoolKey, WorkerPool, uses_cublas
from shared.protocol import SPARE_WARM_ENV, WARM_BASE, WARM_CUBLAS, WARM_NONE
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


@pytest.mark.parametrize(("setting", "matmul", "other"), [
    ("auto", WARM_CUBLAS, WARM_BASE),
    ("cublas", WARM_CUBLAS, WARM_CUBLAS),
    ("none", WARM_NONE, WARM_NONE),
])
def test_what_a_gpu_worker_warms_follows_the_setting_and_the_jobs_source(
        tmp_path: Path, setting: str, matmul: str, other: str) -> None:
    gpu = WorkerPool(Settings(job_dir=tmp_path / "jobs", spare_warm=setting),  # type: ignore[arg-type]
                     "cuda")
    cpu = WorkerPool(Settings(job_dir=tmp_path / "cpu"), "cpu")
    try:
        assert gpu.warm(PoolKey(0), cublas=True) == matmul
        assert gpu.warm(PoolKey(0), cublas=False) == other
        assert gpu.zygote_env(PoolKey(0))[SPARE_WARM_ENV] == matmul
        assert gpu.warm(PoolKey(None, build=True), cublas=True) is None
        assert SPARE_WARM_ENV not in gpu.zygote_env(PoolKey(None, build=True))
        assert cpu.warm(PoolKey(None), cublas=True) is None
        assert SPARE_WARM_ENV not in cpu.zygote_env(PoolKey(None))
    finally:
        gpu.blocking.close()
        cpu.blocking.close()


def test_the_default_is_auto_and_an_unknown_value_is_refused() -> None:
    assert Settings.from_env({}).spare_warm == "auto"
    assert Settings.from_env({"SPARE_WARM": "none"}).spare_warm == "none"
    assert Settings.from_env({"SPARE_WARM": "cublas"}).spare_warm == "cublas"
    with pytest.raises(ValueError, match="SPARE_WARM"):
        Settings.from_env({"SPARE_WARM": "cudnn"})


class Spare:
    def __init__(self, warmed: str | None) -> None:
        self.warmed = warmed
        self.queues = "1"
        self.status = None
        self._gone = asyncio.Event()


def auto_pool(tmp_path: Path, spares: int) -> tuple[WorkerPool, list[str | None]]:
    """A GPU pool under SPARE_WARM=auto whose spares are made at once, recording what each
    warmed."""
    pool = WorkerPool(Settings(job_dir=tmp_path / "jobs", spares_per_gpu=spares,
                               spare_refill="eager"), "cuda")
    started: list[str | None] = []

    async def spawn(key: PoolKey, queues: str | None = None, warm: str | None = None) -> Any:
        started.append(warm)
        return Spare(warm)

    pool.spawn = spawn  # type: ignore[method-assign]
    return pool, started


def test_a_job_takes_a_spare_warmed_as_its_source_needs_and_the_refill_replaces_that_kind(
        tmp_path: Path) -> None:
    pool, started = auto_pool(tmp_path, spares=2)
    key = PoolKey(0)

    async def scenario() -> tuple[Any, Any, Any]:
        pool.replenish(key)  # the first fill: one of each kind
        for _ in range(5):
            await asyncio.sleep(0)
        first = sorted(str(w.warmed) for w in pool._ready[key])
        started.clear()
        plain = await pool.take(key, Needs(cublas=False))
        for _ in range(5):
            await asyncio.sleep(0)
        matmul = await pool.take(key, Needs(cublas=True))
        for _ in range(5):
            await asyncio.sleep(0)
        return first, plain, matmul

    first, plain, matmul = asyncio.run(scenario())
    pool.blocking.close()
    assert first == sorted([WARM_CUBLAS, WARM_BASE])
    assert plain.warmed == WARM_BASE and matmul.warmed == WARM_CUBLAS
    assert started == [WARM_BASE, WARM_CUBLAS]  # each taken spare replaced by its kind


def test_with_none_of_its_kind_ready_a_job_takes_another_and_the_refill_makes_its_kind(
        tmp_path: Path) -> None:
    pool, started = auto_pool(tmp_path, spares=2)
    key = PoolKey(0)
    pool._ready[key] = deque([Spare(WARM_BASE), Spare(WARM_BASE)])  # type: ignore[misc]

    async def scenario() -> Any:
        taken = await pool.take(key, Needs(cublas=True))
        for _ in range(5):
            await asyncio.sleep(0)
        return taken

    taken = asyncio.run(scenario())
    pool.blocking.close()
    assert taken.warmed == WARM_BASE  # no job waits for a kind: only its first matmul is cold
    assert started == [WARM_CUBLAS]  # the mix moves toward what the jobs ask


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

    async def spawn(k: PoolKey, queues: str | None = None, warm: str | None = None) -> Any:
        return Spare(warm)

    pool.spawn = spawn  # type: ignore[method-assign]

    async def scenario() -> tuple[Any, Any]:
        matmul = asyncio.ensure_future(pool.take(key, Needs(cublas=True)))  # first in line
        plain = asyncio.ensure_future(pool.take(key, Needs(cublas=False)))
        await asyncio.sleep(0)
        for warm in (WARM_BASE, WARM_CUBLAS):
            pool._starting[key] = pool._starting.get(key, 0) + 1
            await pool._add_spare(key, warm)
        return await matmul, await plain

    matmul, plain = asyncio.run(scenario())
    pool.blocking.close()
    assert matmul.warmed == WARM_CUBLAS and plain.warmed == WARM_BASE
