"""In CPU mode, jobs running at once take turns to be timed: a timing has the CPU device to
itself (the other jobs' processes stopped, no worker starting), and job processes run one
thread each (harness.process.cpu_threads), so identical pairs compared side by side report
speedups near 1.

Seen before: four concurrent identical /compares of a softmax reported 2.6x, 14x and 24x
beside ~1x, and a reference timed under that contention was kept for later comparisons; then,
taking turns, 0.50-0.56x each (the candidate's team of threads beside the judge's).
"""

from __future__ import annotations

import concurrent.futures
import os
from typing import Any

import httpx
import pytest

from tests.conftest import RAY_ADDRESS_VAR, cuda_available

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(cuda_available(), reason="CPU mode: the CPU is the device"),
    # (read 0.25x for two of four identical pairs in CI: the test cluster's eight slots are
    # eight CPU "devices" on one host's two cores)
    pytest.mark.skipif(bool(os.environ.get(RAY_ADDRESS_VAR)),
                       reason="on a Ray cluster in CPU mode each slot is its own device: "
                       "slots that share a host's cores do not take turns to be timed"),
]

# A problem whose work outweighs the copies of its inputs and outputs: on a 2-core host those
# copies' cost moves with the cores the processes are held to, and the judge's figure of a
# copy-bound call (a softmax over 8 MB) moves with it by up to 30%
REF = ("TAG = '{tag}'\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
       "        return torch.softmax(x @ x, dim=-1)\n\n"
       "def get_inputs():\n    return [torch.randn(384, 384)]\n\n"
       "def get_init_inputs():\n    return []\n")
SAME = REF.replace("class Model", "class ModelNew")


def compare(server: Any, tag: str) -> dict:
    body = {"ref_kernel": {"source_code": REF.format(tag=tag), "kernel_type": "torch"},
            "custom_kernel": {"source_code": SAME.format(tag=tag), "kernel_type": "torch"},
            "num_trials": 30, "num_correct_trials": 2, "reuse_reference": False}
    r = httpx.post(f"{server.url}/compare", json=body, timeout=600)
    assert r.status_code == 200, r.text
    return r.json()["kernel_exec_result"]


def test_four_identical_pairs_compared_at_once_report_speedups_near_one(
        server_factory: Any) -> None:
    server = server_factory(MAX_WORKERS="4")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: compare(server, f"t{i}"), range(4)))
    assert all(r["outcome"] == "success" for r in results), results
    speedups = [r["metadata"]["speedup"] for r in results]
    # (0.50-0.56 each while job processes ran a team of threads; with one thread held to one
    # core, 0.88-1.01 in 20 readings)
    assert all(0.6 <= s <= 1 / 0.6 for s in speedups), speedups
