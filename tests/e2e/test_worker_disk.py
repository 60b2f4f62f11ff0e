"""What a kernel writes stays in its worker's bounded memory (``Settings.worker_scratch_mb``):
its scratch directory, /tmp and /dev/shm each fill up at the cap, so no kernel can fill the
server's disk (where the job store lives) or its memory; a small write works as before.

The server runs in-process (real workers, a cap set by the test)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app import create_app
from shared.settings import Settings
from tests.conftest import cuda_available
from tests.e2e.kernel_report import kernel_report

pytestmark = pytest.mark.e2e

CAP_MB = 32
# Writes up to 3x the cap into each place, then raises a report (the job's runtime_error).
KERNEL = """
import errno
import json
import os


def fill(path, megabytes):
    block = b"x" * (1 << 20)
    written = 0
    try:
        with open(path, "wb") as f:
            for _ in range(megabytes):
                f.write(block)
                f.flush()
                written += 1
        return {"written_mb": written, "error": None}
    except OSError as exc:
        return {"written_mb": written, "error": errno.errorcode.get(exc.errno, str(exc.errno))}
    finally:
        if os.path.exists(path):
            os.remove(path)


def forward(x):
    report = {"cwd": os.getcwd(), "small": fill("small.bin", 1)}
    for where in (".", "/tmp", "/dev/shm"):
        report[where] = fill(os.path.join(where, "big.bin"), @MB@)
    raise RuntimeError("REPORT " + json.dumps(report))
"""


@pytest.fixture
def capped(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        device="auto" if cuda_available() else "cpu", mode="fastapi", max_workers=1,
        spares_per_gpu=1, worker_scratch_mb=CAP_MB, job_store_path=tmp_path / "jobs.sqlite3",
        job_dir=tmp_path / "jobs", build_cache_dir=tmp_path / "cache" / "builds",
        ref_cache_dir=tmp_path / "cache" / "references", jit_cache_dir=tmp_path / "cache" / "jit",
    )
    with TestClient(create_app(settings)) as client:
        yield client


def test_a_kernel_filling_its_scratch_tmp_and_shm_stops_at_the_cap(capped: TestClient) -> None:
    health = capped.get("/health").json()
    if str(health.get("isolation", "none")).startswith("none"):
        pytest.skip(f"workers are not isolated here: {health.get('isolation_detail')}")
    report = kernel_report(capped, KERNEL.replace("@MB@", str(3 * CAP_MB)))
    assert report["small"] == {"written_mb": 1, "error": None}
    for where in (".", "/tmp", "/dev/shm"):
        assert report[where]["error"] == "ENOSPC", report
        assert report[where]["written_mb"] <= CAP_MB, report
    assert capped.get("/health").status_code == 200
