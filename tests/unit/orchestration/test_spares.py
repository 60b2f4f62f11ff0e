"""How many ready workers a pool keeps: SPARES_PER_GPU, or by default sized by GPU memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestration.worker_pool import (
    AUTO_SPARES_MAX,
    AUTO_SPARES_MIN,
    DEFAULT_CPU_SPARES,
    SPARE_GPU_MB,
    PoolKey,
    WorkerPool,
    auto_spares,
)
from shared.settings import Settings, SettingsError

H100_MB, H200_MB, L4_MB, T4_MB = 81559, 143771, 23034, 15360


def test_auto_spares_fill_their_share_of_gpu_memory_within_the_bounds() -> None:
    assert auto_spares(H100_MB) == int(H100_MB * 0.35 // SPARE_GPU_MB) == 27
    assert auto_spares(H200_MB, 0.35) == AUTO_SPARES_MAX
    assert auto_spares(L4_MB, 0.35) == 7
    assert auto_spares(T4_MB, 0.35) == AUTO_SPARES_MIN  # 5 fit, but never under the minimum
    assert auto_spares(L4_MB, 0.5) == 11
    assert auto_spares(None, 0.35) == AUTO_SPARES_MIN  # memory unknown


def test_spares_per_gpu_auto_or_unset_means_sized_by_memory_and_a_number_is_kept() -> None:
    assert Settings.from_env({}).spares_per_gpu is None
    assert Settings.from_env({"SPARES_PER_GPU": "auto"}).spares_per_gpu is None
    assert Settings.from_env({"SPARES_PER_GPU": "12"}).spares_per_gpu == 12
    with pytest.raises(SettingsError, match="SPARES_PER_GPU"):
        Settings.from_env({"SPARES_PER_GPU": "many"})


def pool(tmp_path: Path, **changes: object) -> WorkerPool:
    settings = Settings(job_dir=tmp_path / "jobs", job_store_path=tmp_path / "jobs.sqlite3",
                        build_cache_dir=tmp_path / "cache", ref_cache_dir=tmp_path / "refs",
                        **changes)  # type: ignore[arg-type]
    return WorkerPool(settings, "cuda", gpu_memory_mb={0: H100_MB, 1: T4_MB})


def test_each_gpu_pool_keeps_spares_for_its_own_memory_and_the_cpu_pool_its_default(
        tmp_path: Path) -> None:
    workers = pool(tmp_path)
    try:
        assert workers.spares(PoolKey(0)) == 27
        assert workers.spares(PoolKey(1)) == AUTO_SPARES_MIN
        assert workers.spares(PoolKey(None)) == DEFAULT_CPU_SPARES
    finally:
        workers.blocking.close()


def test_an_explicit_spare_count_applies_to_every_pool(tmp_path: Path) -> None:
    workers = pool(tmp_path, spares_per_gpu=3)
    try:
        assert [workers.spares(PoolKey(g)) for g in (0, 1, None)] == [3, 3, 3]
    finally:
        workers.blocking.close()
