"""The reference is timed before the custom kernel's code is loaded anywhere, so nothing the
kernel starts (a thread, a long-running kernel) can slow the baseline its speedup is
measured against."""

from __future__ import annotations

import re
import time

import httpx
import pytest

pytestmark = pytest.mark.e2e

TRIALS = 5
LOG_DEADLINE_S = 15.0
# Both sides print the shared monotonic clock: the reference at every call, the custom
# kernel's module when it is imported (the first moment any of its code runs).
REF = """
import time


class Model(torch.nn.Module):
    def forward(self, x):
        print(f"REF_CALL {time.monotonic():.6f}", flush=True)
        return x * 3


def get_inputs():
    return [torch.randn(256)]


def get_init_inputs():
    return []
"""
CUSTOM = """
import time

print(f"CUSTOM_LOADED {time.monotonic():.6f}", flush=True)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return 3 * x
"""


def job_log(client: httpx.Client, job_id: str) -> str:
    """The job's log, once written (a successful job's comes a moment after its answer)."""
    deadline = time.monotonic() + LOG_DEADLINE_S
    while True:
        r = client.get(f"/job/{job_id}/log")
        if r.status_code == 200 and "CUSTOM_LOADED" in r.text or time.monotonic() > deadline:
            return r.text
        time.sleep(0.1)


def test_every_timed_call_of_the_reference_precedes_the_custom_kernels_first_code(
        client: httpx.Client) -> None:
    r = client.post("/compare", json={
        "ref_kernel": {"source_code": REF, "kernel_type": "torch"},
        "custom_kernel": {"source_code": CUSTOM, "kernel_type": "torch"},
        "num_trials": TRIALS, "num_correct_trials": 2, "reuse_reference": False})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["kernel_exec_result"]["outcome"] == "success", body
    text = job_log(client, body["job_id"])
    ref_calls = [float(t) for t in re.findall(r"REF_CALL (\d+\.\d+)", text)]
    loaded = [float(t) for t in re.findall(r"CUSTOM_LOADED (\d+\.\d+)", text)]
    assert len(loaded) == 1, text[-2000:]
    before = [t for t in ref_calls if t < loaded[0]]
    after = [t for t in ref_calls if t > loaded[0]]
    # timing: warm-up calls and TRIALS samples, all before; the trials and the checks after
    assert len(before) >= TRIALS + 3, (len(before), len(after))
    assert len(after) >= 2, (len(before), len(after))
