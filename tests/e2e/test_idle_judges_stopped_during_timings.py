"""An idle judge (a process that keeps a reference loaded between comparisons) has run that
reference's code, so a thread the reference started may still be running there; the first
timing of another job stops it like every other job's process, so it can neither slow that
timing nor the reference figure another comparison will share, and it stays stopped while it
is idle (one stop per idle stretch, not one per timing) until a job leases it again.

The reference below (its candidate is a plain twin) starts a thread that wakes every 2 ms and
notes every gap longer than GAP_S it sees (a stopped process's thread sees one as long as the
stop). Job 1 leaves its judge idle; job 2 (another reference) is timed; job 3 compares against
the first reference again, reuses the idle judge and prints the gaps: one began during job 2,
covers its timing call and lasted past job 2's end, until job 3 leased the judge.
"""

from __future__ import annotations

import os
import re
import signal
import time
from typing import Any

import httpx
import pytest

from orchestration.gpu_gate import process_tree
from tests.conftest import RAY_ADDRESS_VAR

pytestmark = pytest.mark.e2e

GAP_S = 0.05
SPINNER = """
import threading
import time

GAPS = []


def _watch():
    last = time.monotonic()
    while True:
        time.sleep(0.002)
        now = time.monotonic()
        if now - last > GAP_S_VALUE:
            GAPS.append((last, now))
        last = now


threading.Thread(target=_watch, daemon=True).start()


class Model(torch.nn.Module):
    def forward(self, x):
        print("GAPS " + " ".join(f"{a:.6f}-{b:.6f}" for a, b in GAPS), flush=True)
        return x * 3


def get_inputs():
    return [torch.randn(256)]


def get_init_inputs():
    return []
""".replace("GAP_S_VALUE", str(GAP_S))
SPINNER_TWIN = """
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return 3 * x
"""
PLAIN = """
class Model(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(256, 1024)]


def get_init_inputs():
    return []
"""


def compare(client: httpx.Client, ref: str, num_trials: int) -> dict[str, Any]:
    twin = SPINNER_TWIN if ref is SPINNER else ref.replace("class Model", "class ModelNew")
    r = client.post("/compare", json={
        "ref_kernel": {"source_code": ref, "kernel_type": "torch"},
        "custom_kernel": {"source_code": twin, "kernel_type": "torch"},
        "num_trials": num_trials, "num_correct_trials": 1}, timeout=300)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["kernel_exec_result"]["outcome"] == "success", body
    return body


def job_log(client: httpx.Client, job_id: str, marker: str) -> str:
    deadline = time.monotonic() + 15.0
    while True:
        r = client.get(f"/job/{job_id}/log")
        if r.status_code == 200 and marker in r.text or time.monotonic() > deadline:
            return r.text
        time.sleep(0.1)


def test_an_idle_judges_threads_are_stopped_while_another_job_is_timed(
        server_factory: Any) -> None:
    server = server_factory(MAX_WORKERS="1")
    with httpx.Client(base_url=server.url, timeout=300) as client:
        compare(client, SPINNER, 5)  # its judge stays, idle, with the thread running
        began = time.monotonic()
        second = compare(client, PLAIN, 200)
        ended = time.monotonic()
        third = compare(client, SPINNER, 5)
        assert third["kernel_exec_result"]["metadata"]["reference"]["reused"], third
        text = job_log(client, third["job_id"], "GAPS")
    lines = [line for line in text.splitlines() if line.startswith("GAPS")]
    assert lines, text[-2000:]
    gaps = [(float(a), float(b)) for a, b in re.findall(r"(\d+\.\d+)-(\d+\.\d+)", lines[-1])]
    stopped = [(a, b) for a, b in gaps if began <= a <= ended]
    timing_ms = second["kernel_exec_result"]["metadata"]["worker_calls"][
        "custom.time_kernel"]["ms"]
    # stopped from job 2's first timing on, through its timing call, until job 3 leased it
    assert stopped, (began, ended, gaps)
    first, last = max(stopped, key=lambda gap: gap[1] - gap[0])
    assert (last - first) * 1e3 >= timing_ms, (stopped, timing_ms)
    assert last >= ended, (stopped, ended)


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


@pytest.mark.skipif(bool(os.environ.get(RAY_ADDRESS_VAR)),
                    reason="on a Ray cluster the workers are the node's, not the server's")
def test_a_killed_server_leaves_no_process_behind_not_even_an_idle_judge_held_stopped(
        server_factory: Any) -> None:
    server = server_factory(MAX_WORKERS="1")
    with httpx.Client(base_url=server.url, timeout=300) as client:
        compare(client, PLAIN, 5)  # its judge stays, idle
        compare(client, SPINNER, 5)  # whose timing stops that idle judge, and leaves it so
    tree = process_tree(server.proc.pid)
    assert "T" in {_state(pid) for pid in tree}, [(pid, _state(pid)) for pid in tree]
    os.killpg(server.proc.pid, signal.SIGKILL)  # no shutdown: the server is just gone
    server.proc.wait()
    deadline = time.monotonic() + 15.0
    left = tree
    while time.monotonic() < deadline:
        left = [pid for pid in tree if _state(pid) not in (None, "Z")]
        if not left:
            break
        time.sleep(0.1)
    assert not left, [(pid, _state(pid)) for pid in left]

