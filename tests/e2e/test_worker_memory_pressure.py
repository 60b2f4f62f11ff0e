"""When host memory runs out, the kernel's OOM killer takes a job process, never the server or
the zygote: every job process (and whatever it forks) has the highest OOM score adjustment."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import Server

pytestmark = pytest.mark.e2e

# The reference says what a job process should read; the kernel reads its own, and that of a
# process it forks, so the comparison passes only if both are marked.
REF = ("class Model(torch.nn.Module):\n    def forward(self, x):\n"
       "        return torch.full((2,), 1000.0)\n\n"
       "def get_inputs():\n    return [torch.zeros(1)]\n\n"
       "def get_init_inputs():\n    return []\n")
KERNEL = """
import subprocess
import sys


class ModelNew(torch.nn.Module):
    def forward(self, x):
        own = float(open("/proc/self/oom_score_adj").read())
        child = float(subprocess.run(
            [sys.executable, "-c", "print(open('/proc/self/oom_score_adj').read())"],
            capture_output=True, text=True, check=True).stdout)
        return torch.tensor([own, child])
"""


def test_a_job_process_and_its_children_are_the_oom_killers_first_choice(
        client: httpx.Client) -> None:
    r = client.post("/compare", json={
        "ref_kernel": {"source_code": REF, "kernel_type": "torch"},
        "custom_kernel": {"source_code": KERNEL, "kernel_type": "torch"},
        "num_trials": 1, "num_correct_trials": 1})
    assert r.status_code == 200, r.text
    result = r.json()["kernel_exec_result"]
    assert result["outcome"] == "success", result


def test_the_server_itself_keeps_its_default_oom_score(live_server: Server) -> None:
    with open(f"/proc/{live_server.proc.pid}/oom_score_adj") as f:
        assert int(f.read()) <= 0
