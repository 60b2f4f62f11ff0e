"""The server with ``EXECUTOR=ray`` on a real Ray cluster of two nodes on this host (a head
and a second raylet, on loopback, in CPU mode: scripts/ray_local_cluster.py).

- The end-to-end suite (tests/e2e) passes with every server it starts running its jobs on the
  cluster (a test or two that fail are run once more, and must pass then: see the test).
- Jobs run on both nodes, and /health and /stats show the cluster.
- Killing a slot's Ray worker process mid-job loses no job: it runs again on another slot;
  losing that one too ends the job ``failed`` with the reason.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import (
    FAILED_IDS_VAR,
    RAY_ADDRESS_VAR,
    ROOT,
    Server,
    cuda_available,
    ray_env,
    start_server,
)
from tests.e2e.test_rest_api import processes_with_argument

pytest.importorskip("ray", reason="EXECUTOR=ray needs Ray: pip install -e '.[ray]'")
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(cuda_available(), reason="this cluster runs in CPU mode; on a GPU host "
                       "see docs/SCALE_OUT.md, 'Checking a cluster'"),
]

CLUSTER_START_S = 120
# Tests of the suite that may fail once on the cluster and pass when run again (more failed:
# the cluster broke something)
MOST_RUN_AGAIN = 2
X_IO = {"args": [{"name": "x", "type": "tensor", "role": "input",
                  "tensor_spec": {"shape": [64], "init": {"kind": "randn", "seed": 1}}}]}


def sleeper(seconds: float, marker: str | None = None) -> dict[str, Any]:
    """A kernel whose forward sleeps; with ``marker``, it also starts ``sleep <marker>``."""
    child = f"        subprocess.Popen(['sleep', '{marker}'])\n" if marker else ""
    source = ("import subprocess, time\nimport torch\n"
              "class Model(torch.nn.Module):\n    def forward(self, x):\n"
              f"{child}        time.sleep({seconds})\n        return x\n")
    return {"kernel": {"source_code": source, "kernel_type": "torch", "io": X_IO}, "timeout": 120}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A local two-node cluster; its address."""
    state = tmp_path_factory.mktemp("ray-cluster")
    address_file = state / "address"
    log_path = state / "cluster.log"
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "ray_local_cluster.py"), "--nodes", "2",
         "--slots", "4", "--address-file", str(address_file)],
        cwd=ROOT, stdout=log_path.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + CLUSTER_START_S
    while not address_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"the Ray cluster did not start:\n{log_path.read_text()[-4000:]}")
        time.sleep(0.2)
    yield address_file.read_text().strip()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture
def server(cluster: str, tmp_path: Path) -> Iterator[Server]:
    started = start_server(tmp_path, ray_env(tmp_path, cluster))
    yield started
    started.stop()


def wait_for(fetch: Callable[[], Any], what: str, ok: Callable[[Any], Any] = bool,
             deadline_s: float = 120) -> Any:
    """``fetch()`` once ``ok`` holds for it, polled until ``deadline_s``."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        found = fetch()
        if ok(found):
            return found
        time.sleep(0.1)
    raise AssertionError(f"not seen within {deadline_s} s: {what}")


def slot_running(http: httpx.Client, job_id: str) -> dict[str, Any] | None:
    slots = http.get("/stats").json()["cluster"]["slots"]
    return next((s for s in slots if s["job_id"] == job_id), None)


def final_status(http: httpx.Client, job_id: str) -> dict[str, Any]:
    return wait_for(lambda: http.get(f"/job/{job_id}").json(), f"job {job_id} ended",
                    lambda s: s["state"] in ("completed", "failed", "timed_out"))


def run_e2e(cluster: str, failed_ids: Path,
            *ids: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """pytest on ``ids`` (by default tests/e2e) with every server on the cluster; the run and
    the ids of the tests that failed in it."""
    failed_ids.write_text("")
    env = dict(os.environ, **{RAY_ADDRESS_VAR: cluster, FAILED_IDS_VAR: str(failed_ids)})
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *(ids or ["tests/e2e"]), "-q", "-p", "no:cacheprovider"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1700, check=False)
    return done, list(dict.fromkeys(failed_ids.read_text().split("\n")[:-1]))


def summary_line(done: subprocess.CompletedProcess[str]) -> str:
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


@pytest.mark.timeout(1800)
def test_the_end_to_end_suite_passes_with_every_job_run_on_the_cluster(
        cluster: str, tmp_path: Path) -> None:
    done, failed = run_e2e(cluster, tmp_path / "failed")
    print(f"end-to-end suite through the Ray cluster: {summary_line(done)}")
    if done.returncode != 0 and 0 < len(failed) <= MOST_RUN_AGAIN:
        # The cluster's daemons and slots share this host's cores with the suite, whose CPU
        # timings a moment of load can move (a 20 us kernel's three samples read 1.2 ms once).
        # What failed is run once more, alone; it must pass then, and the first failure is
        # reported as a warning with its output.
        warnings.warn(f"failed on the cluster, run again: {failed}\n{done.stdout[-6000:]}",
                      stacklevel=1)
        done, failed = run_e2e(cluster, tmp_path / "failed-again", *failed)
        print(f"run again: {summary_line(done)}")
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
    assert " passed" in summary_line(done) and "failed" not in summary_line(done)


def test_jobs_run_on_both_nodes_and_health_and_stats_show_them(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=120) as http:
        health = http.get("/health").json()
        cluster = health["cluster"]
        alive = {n["node_id"] for n in cluster["nodes"] if n["alive"]}
        assert len(alive) == 2 and cluster["resource"] == "kes_slot"
        assert all(n["gpus"] == 4 and n["slots"] == 1 for n in cluster["nodes"] if n["alive"])
        assert health["status"] == "healthy" and health["isolation"] != "none"

        jobs = [http.post("/validate", params={"wait": "false"}, json=sleeper(1.5)).json()["job_id"]
                for _ in range(2)]
        # One job per slot, so both nodes are busy at once.
        stats = wait_for(lambda: http.get("/stats").json(), "both slots busy",
                         lambda s: s["cluster"]["busy"] == 2)
        assert {n["node_id"] for n in stats["cluster"]["nodes"] if n["busy"] == 1} == alive
        ran_on = set()
        for job_id in jobs:
            status = final_status(http, job_id)
            assert status["state"] == "completed", status
            ran_on.add(status["result"]["kernel_exec_result"]["metadata"]["ray"]["node_id"])
        assert ran_on == alive
        assert http.get("/stats").json()["cluster"]["busy"] == 0


def test_killing_the_ray_worker_mid_job_runs_the_job_again_and_loses_nothing(
    server: Server,
) -> None:
    marker = f"{300 + random.random():.9f}"  # a sleep argument no other process has
    with httpx.Client(base_url=server.url, timeout=120) as http:
        job_id = http.post("/validate", params={"wait": "false"},
                           json=sleeper(3, marker)).json()["job_id"]
        first = wait_for(lambda: slot_running(http, job_id), "the job on a slot")
        wait_for(lambda: processes_with_argument(marker), "the kernel running")

        os.kill(first["pid"], signal.SIGKILL)  # the slot's actor: a Ray worker process
        status = final_status(http, job_id)

        assert status["state"] == "completed", status
        ray = status["result"]["kernel_exec_result"]["metadata"]["ray"]
        assert ray["attempts"] == 2
        # What the killed worker had started died with it; the second run's ended with its job.
        wait_for(lambda: processes_with_argument(marker), "no process of the job left",
                 lambda found: not found, deadline_s=30)
        # The cluster heals: Ray restarts the actor, and the slot takes jobs again.
        healed = wait_for(lambda: http.get("/stats").json()["cluster"], "the lost slot back",
                          lambda c: c["lost"] == 0)
        again = next(s for s in healed["slots"] if s["index"] == first["index"])
        assert again["pid"] != first["pid"]
        assert http.get("/health").json()["status"] == "healthy"


def test_a_job_whose_worker_is_killed_twice_fails_with_the_reason(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=120) as http:
        job_id = http.post("/validate", params={"wait": "false"},
                           json=sleeper(30)).json()["job_id"]
        first = wait_for(lambda: slot_running(http, job_id), "the job on a slot")
        os.kill(first["pid"], signal.SIGKILL)
        second = wait_for(lambda: slot_running(http, job_id), "the job on another slot",
                          lambda s: s is not None and s["pid"] != first["pid"])
        os.kill(second["pid"], signal.SIGKILL)
        status = final_status(http, job_id)

        assert status["state"] == "failed"
        assert "the Ray node or worker running this job was lost twice" in status["error"]
        assert "ActorUnavailableError" in status["error"] or "ActorDiedError" in status["error"]
