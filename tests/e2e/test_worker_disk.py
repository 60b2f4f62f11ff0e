"""What a kernel writes stays in its worker's bounded memory (WORKER_SCRATCH_MB): its scratch
directory, /tmp and /dev/shm each fill up at the cap, so no kernel can fill the server's disk
(where the job store lives) or its memory; a small write works as before."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

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


def test_a_kernel_filling_its_scratch_tmp_and_shm_stops_at_the_cap(server_factory: Any) -> None:
    server = server_factory(WORKER_SCRATCH_MB=str(CAP_MB))
    health = httpx.get(f"{server.url}/health", timeout=10).json()
    if str(health.get("isolation", "none")).startswith("none"):
        pytest.skip(f"workers are not isolated here: {health.get('isolation_detail')}")
    report = kernel_report(server.url, KERNEL.replace("@MB@", str(3 * CAP_MB)))
    assert report["small"] == {"written_mb": 1, "error": None}
    for where in (".", "/tmp", "/dev/shm"):
        assert report[where]["error"] == "ENOSPC", report
        assert report[where]["written_mb"] <= CAP_MB, report
    assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
