"""Helpers for unit tests that drive the real executor: in CPU mode, or on a GPU it is told of
(no GPU is touched; the tests replace the worker calls)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from orchestration.executor import LocalExecutor
from orchestration.gpu_pool import Slot
from shared.models import GPUInfo
from shared.settings import Settings


@contextmanager
def cpu_executor(root: Path, **settings: object
                 ) -> Iterator[tuple[asyncio.AbstractEventLoop, LocalExecutor]]:
    """A started LocalExecutor with one CPU slot and two spares, its state under ``root``,
    and the event loop to run it on; ``settings`` override the defaults."""
    config = Settings(**{"job_dir": root / "jobs", "job_store_path": root / "jobs.sqlite3",
                         "build_cache_dir": root / "cache", "ref_cache_dir": root / "refs",
                         "spares_per_gpu": 2, "max_workers": 1, **settings})  # type: ignore[arg-type]
    loop = asyncio.new_event_loop()
    ex = LocalExecutor(config, "cpu", [Slot(0, None)], [])
    loop.run_until_complete(ex.start())
    try:
        yield loop, ex
    finally:
        loop.run_until_complete(ex.close())
        loop.close()


def gpu_executor(root: Path, jobs_per_gpu: int = 1, **settings: object) -> LocalExecutor:
    """A LocalExecutor for one H100 (GPU 0) with ``jobs_per_gpu`` slots on it, not started,
    its state under ``root``; ``settings`` override the defaults."""
    config = Settings(**{"job_dir": root / "jobs", "job_store_path": root / "jobs.sqlite3",
                         "build_cache_dir": root / "cache", "ref_cache_dir": root / "refs",
                         "jobs_per_gpu": jobs_per_gpu, **settings})  # type: ignore[arg-type]
    return LocalExecutor(config, "cuda", [Slot(i, 0) for i in range(jobs_per_gpu)],
                         [GPUInfo(id=0, name="NVIDIA H100 80GB HBM3", memory_total_mb=81559)])
