"""A root server's build cache under root's own home (0700), as the default puts it: the build
stage's sandboxed worker (another uid) builds into it, and a job's worker reads from it.

Without the sandbox's open cover over ``/root``, every load_inline kernel would answer
``PermissionError ... /root/.cache/kernel_eval/builds/torch_ext/<key>/complete.json``: the
workers' uid cannot pass through ``/root``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestration.build_stage import BuildStage
from orchestration.job_step import Clock, JobStep
from orchestration.worker_pool import PoolKey, WorkerPool
from shared.models import KernelCode, WorkerJob
from shared.protocol import Load, Loaded, RanOnce, Role, RunOnce
from shared.settings import Settings

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="a root server's cache is the subject"),
    pytest.mark.skipif(not all(shutil.which(t) for t in ("ninja", "c++")),
                       reason="needs ninja and a C++ compiler"),
]

# A torch_cuda source whose extension is C++ only: it builds on a CPU-only machine.
SOURCE = """
from torch.utils.cpp_extension import load_inline

_lib = load_inline(name="kes_root_cache_probe", cpp_sources='extern "C" int answer() { return 42; }',
                   no_implicit_headers=True, is_python_module=False)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x
"""
# A kernel that reads what the build left, from a worker that is not the builder.
READER = """
from pathlib import Path

MARKERS = list(Path(@CACHE@).rglob("complete.json"))


class Model(torch.nn.Module):
    def forward(self, x):
        return x + len(MARKERS) + len(MARKERS[0].read_text()) * 0
"""


@pytest.fixture
def closed_home() -> Iterator[Path]:
    """A directory like /root: only its owner (root) may enter it (not under /tmp, which a
    worker sees as a private tmpfs, and not above the interpreter)."""
    home = Path("/var/tmp") / f"kes-home-{uuid.uuid4().hex[:8]}"
    home.mkdir(mode=0o700)
    os.chmod(home, 0o700)
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_the_build_stage_and_a_jobs_worker_use_a_cache_under_a_closed_home(
        closed_home: Path, tmp_path: Path) -> None:
    cache = closed_home / ".cache" / "kernel_eval" / "builds"
    settings = Settings(job_dir=tmp_path / "jobs", job_store_path=tmp_path / "jobs.sqlite3",
                        build_cache_dir=cache, ref_cache_dir=tmp_path / "refs",
                        spares_per_gpu=1)
    job = WorkerJob(job_id="b", kind="validate", device="cpu", cache_dir=str(cache),
                    kernel=KernelCode(source_code=SOURCE, kernel_type="torch_cuda"))
    reader = KernelCode(source_code=READER.replace("@CACHE@", repr(str(cache))),
                        kernel_type="torch", io={"args": [
                            {"name": "x", "type": "tensor", "role": "input",
                             "tensor_spec": {"shape": [4], "dtype": "float32",
                                             "init": {"kind": "randn"}}}]})

    async def progress(text: str, fraction: float) -> None:
        return None

    async def scenario() -> tuple[object, object, dict[str, int], object]:
        pool = WorkerPool(settings, "cpu")
        try:
            stage = BuildStage(pool, 1)
            first = await stage.run(job, 120, JobStep(), Clock(), progress)
            again = await stage.run(job, 120, JobStep(), Clock(), progress)
            worker = await pool.take(PoolKey(None))
            loaded, _ = await worker.call(Load(job=job.model_copy(update={"kernel": reader}),
                                               role=Role.KERNEL))
            assert isinstance(loaded, Loaded), loaded
            ran, _ = await worker.call(RunOnce())
            worker.kill()
            return first, again, dict(stage.stats), ran
        finally:
            await pool.close()

    first, again, stats, ran = asyncio.run(scenario())
    assert first is None and again is None, (first, again)  # no verdict: the builds passed
    assert stats == {"lookups": 2, "hits": 1}  # built once, then found
    assert isinstance(ran, RanOnce), ran  # the job's worker read the marker the build wrote
    assert list(cache.rglob("complete.json"))
    # the workers ran as another uid, and still the cache's home is closed to others
    assert subprocess.run(["stat", "-c", "%a", str(closed_home)], capture_output=True,
                          text=True, check=True).stdout.strip() == "700"
