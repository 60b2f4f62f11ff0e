"""A timing run has a budget of its own: a kernel whose calls get slower and slower, or one
that stops returning, answers long before its job's timeout and frees the GPU for the next
job; an honest kernel's run is untouched."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from judge.clock import CALL_BUDGET_S

pytestmark = [pytest.mark.gpu, pytest.mark.e2e]

# ~0.1 ms of honest work on an H200: large enough that an honest run reads 1.00 within 10%
# (a call of a few microseconds reads a few tens of percent either way)
REF = ("class Model(torch.nn.Module):\n    def forward(self, a):\n        return a * 2\n\n"
       "def get_inputs():\n    return [torch.randn(1 << 26)]\n\n"
       "def get_init_inputs():\n    return []\n")
# Each call keeps the GPU 1.4x as long as the one before (a sleep of that many cycles beside
# the honest work): calls that slow down as a leaking kernel's do.
SLOWING = ("class ModelNew(torch.nn.Module):\n"
           "    def __init__(self):\n        super().__init__()\n        self.cycles = 20000.0\n"
           "    def forward(self, a):\n"
           "        self.cycles *= 1.4\n"
           "        torch.cuda._sleep(int(min(self.cycles, 2e9)))\n"
           "        return a * 2\n")
# After its correctness trials, every call keeps the GPU for a minute.
STUCK = ("class ModelNew(torch.nn.Module):\n"
         "    def __init__(self):\n        super().__init__()\n        self.calls = 0\n"
         "    def forward(self, a):\n"
         "        self.calls += 1\n"
         "        if self.calls > 6:\n"
         "            torch.cuda._sleep(int(120e9))\n"
         "        return a * 2\n")


def compare(client: httpx.Client, custom: str, **extra: Any) -> dict[str, Any]:
    r = client.post("/compare", json={
        "ref_kernel": {"source_code": REF, "kernel_type": "torch"},
        "custom_kernel": {"source_code": custom, "kernel_type": "torch"},
        "num_correct_trials": 2, "timeout": 600, **extra})
    assert r.status_code in (200, 408, 422), r.text
    return r.json()


def test_a_kernel_whose_calls_keep_slowing_ends_its_timing_early_and_says_why(
        client: httpx.Client) -> None:
    began = time.monotonic()
    body = compare(client, SLOWING)
    took = time.monotonic() - began
    result = body["kernel_exec_result"]
    assert result["outcome"] == "success", body
    figures = result["metadata"]["timing_figures"]
    assert figures["stopped_by"] in ("slowing", "budget"), figures
    assert figures["cut_short"], figures
    assert result["integrity"]["suspicious"] or figures["stopped_by"] == "budget", result
    assert took < 90, took


def test_a_kernel_that_stops_returning_answers_within_the_call_budget_and_the_next_job_runs(
        server_factory: Any) -> None:
    server = server_factory(MAX_WORKERS="2")
    answers: dict[str, Any] = {}

    def stuck() -> None:
        with httpx.Client(base_url=server.url, timeout=900) as c:
            began = time.monotonic()
            answers["stuck"] = compare(c, STUCK)
            answers["stuck_s"] = time.monotonic() - began

    thread = threading.Thread(target=stuck)
    thread.start()
    time.sleep(1.0)  # queued behind it: one job per GPU
    with httpx.Client(base_url=server.url, timeout=900) as c:
        began = time.monotonic()
        honest = compare(c, REF.replace("class Model", "class ModelNew"))
        honest_s = time.monotonic() - began
    thread.join()
    stuck_result = answers["stuck"]["kernel_exec_result"]
    assert stuck_result["outcome"] != "success", answers["stuck"]
    assert answers["stuck_s"] < CALL_BUDGET_S + 60, answers
    assert honest["kernel_exec_result"]["outcome"] == "success", honest
    assert honest_s < answers["stuck_s"] + 30, (honest_s, answers["stuck_s"])
    speedup = honest["kernel_exec_result"]["metadata"]["speedup"]
    assert 0.9 < speedup < 1.1, speedup
