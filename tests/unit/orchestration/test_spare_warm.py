"""SPARE_WARM: what a GPU worker warms before its job. The setting reaches every GPU worker's
environment, and the worker warms cuBLAS's paths only when it says ``cublas``."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from harness.process import prepare_process
from orchestration.worker_pool import PoolKey, WorkerPool
from shared.protocol import SPARE_WARM_ENV
from shared.settings import Settings


@pytest.mark.parametrize("warm", ["cublas", "none"])
def test_the_setting_reaches_every_gpu_worker_and_no_build_or_cpu_worker(
        tmp_path: Path, warm: str) -> None:
    settings = Settings(job_dir=tmp_path / "jobs", spare_warm=warm)  # type: ignore[arg-type]
    gpu = WorkerPool(settings, "cuda")
    cpu = WorkerPool(Settings(job_dir=tmp_path / "cpu"), "cpu")
    try:
        assert gpu.zygote_env(PoolKey(0))[SPARE_WARM_ENV] == warm
        assert SPARE_WARM_ENV not in gpu.zygote_env(PoolKey(None, build=True))
        assert SPARE_WARM_ENV not in cpu.zygote_env(PoolKey(None))
    finally:
        gpu.blocking.close()
        cpu.blocking.close()


def test_the_default_warms_cublas_and_an_unknown_value_is_refused() -> None:
    assert Settings.from_env({}).spare_warm == "cublas"
    assert Settings.from_env({"SPARE_WARM": "none"}).spare_warm == "none"
    with pytest.raises(ValueError, match="SPARE_WARM"):
        Settings.from_env({"SPARE_WARM": "cudnn"})


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
            def to(self, dtype: str) -> Any:
                made.append(f"matmul {dtype}")
                return self

            def __matmul__(self, other: Any) -> Any:
                return types.SimpleNamespace(sum=lambda: types.SimpleNamespace(item=lambda: 0))

        return Matrix()


@pytest.mark.parametrize(("warm", "matmuls"), [("cublas", ["fp32", "fp16", "bf16"]),
                                               ("none", []), (None, ["fp32", "fp16", "bf16"])])
def test_a_gpu_worker_warms_cublas_only_when_told_to(
        monkeypatch: pytest.MonkeyPatch, warm: str | None, matmuls: list[str]) -> None:
    torch = FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    if warm is None:
        monkeypatch.delenv(SPARE_WARM_ENV, raising=False)
    else:
        monkeypatch.setenv(SPARE_WARM_ENV, warm)
    prepare_process("cuda")
    assert torch.made[0] == "context"
    assert [m.split()[1] for m in torch.made if m.startswith("matmul")] == matmuls
    if not matmuls:
        assert "zeros" in torch.made  # the context is made all the same
