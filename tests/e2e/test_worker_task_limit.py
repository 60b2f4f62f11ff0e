"""Each job process sits in a cgroup holding at most WORKER_MAX_TASKS processes and threads, so
a fork or thread bomb stops there and the host's process table keeps room for the server."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.e2e.kernel_report import kernel_report
from worker_host.sandbox import task_group_parent

pytestmark = pytest.mark.e2e

LIMIT = 64
# Reads its cgroup's limit, then starts threads until one fails; raises a report.
KERNEL = """
import json
import threading


def forward(x):
    limit = None
    for line in open("/proc/self/cgroup").read().splitlines():
        hierarchy, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            limit = open(f"/sys/fs/cgroup/pids{path}/pids.max").read().strip()
        elif hierarchy == "0" and limit is None:
            try:
                limit = open(f"/sys/fs/cgroup{path}/pids.max").read().strip()
            except OSError:
                pass
    release = threading.Event()
    started, error = [], None
    try:
        for _ in range(@TRY@):
            t = threading.Thread(target=release.wait)
            t.start()
            started.append(t)
    except RuntimeError as exc:
        error = str(exc)
    release.set()
    for t in started:
        t.join()
    raise RuntimeError("REPORT " + json.dumps({"limit": limit, "started": len(started),
                                                "error": error}))
"""


@pytest.mark.skipif(task_group_parent() is None, reason="no pids cgroup this host lets us use")
def test_a_thread_bomb_stops_at_the_workers_task_limit(server_factory: Any) -> None:
    server = server_factory(WORKER_MAX_TASKS=str(LIMIT))
    health = httpx.get(f"{server.url}/health", timeout=10).json()
    report = kernel_report(server.url, KERNEL.replace("@TRY@", str(4 * LIMIT)))
    assert report["limit"] == str(LIMIT), (report, health.get("isolation_detail"))
    assert report["error"] is not None and report["started"] < LIMIT, report
    assert f"at most {LIMIT} processes and threads" in health.get("isolation_detail", "")
    assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200


@pytest.mark.skipif(task_group_parent() is None, reason="no pids cgroup this host lets us use")
def test_every_worker_of_a_pool_started_in_a_burst_sits_in_its_task_group(
        server_factory: Any) -> None:
    """Workers are forked in batches; each makes its group, then enters it. A sweep of ended
    workers' groups between the two must not take the group away (the worker would then run
    in the root cgroup, without its limit)."""
    server = server_factory(WORKER_MAX_TASKS=str(LIMIT), MAX_WORKERS="4")
    source = KERNEL.replace("@TRY@", "0")  # reads its limit, starts no thread
    with ThreadPoolExecutor(12) as pool:
        reports = list(pool.map(lambda _: kernel_report(server.url, source), range(24)))
    assert [r["limit"] for r in reports] == [str(LIMIT)] * len(reports), reports
