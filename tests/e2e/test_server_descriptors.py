"""Comparisons that end in every way a kernel can end them leave no descriptor open in the
server: a descriptor of tensors a worker exported (on a GPU, exported GPU memory) keeps them
allocated while any process holds it, so one left open per failing job fills the GPU."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from orchestration.references import LINGER_S
from tests.conftest import Server

pytestmark = pytest.mark.e2e

REF = ("TAG = '{tag}'\n\n"
       "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n\n"
       "def get_inputs():\n    return [torch.randn(256, 256)]\n\n"
       "def get_init_inputs():\n    return []\n")


def custom(body: str) -> str:
    return f"class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        {body}\n"


# How each custom kernel ends its comparison: at which step, and with which outcome.
ENDINGS = {
    "raises in its first trial": (custom("raise RuntimeError('no')"), "runtime_error"),
    "dies in its first trial": (custom("import os; os._exit(3)"), "runtime_error"),
    "wrong in its first trial": (custom("return x * 3"), "incorrect"),
    "raises once timing starts": (
        "CALLS = [0]\n\n" + custom("CALLS[0] += 1\n        "
                                   "if CALLS[0] > 8: raise RuntimeError('late')\n        "
                                   "return x * 2"), "runtime_error"),
    "correct": (custom("return x * 2"), "success"),
}


def open_descriptors(pid: int) -> set[str]:
    """What the descriptors of ``pid`` point at; one closed while they are read is left out
    (the server is still writing a finished job's log)."""
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):
            found.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return found


def count_open(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_no_job_ending_leaves_a_descriptor_open_in_the_server(
        server_factory: Callable[..., Server], tmp_path: Path) -> None:
    # two spares, so each taken one is replaced at once: the pool holds as many workers (and
    # their channels' descriptors) at both counts, where a larger batch would hold more at one
    server = server_factory(tmp_path / "state", SPARES_PER_GPU="2")
    with httpx.Client(base_url=server.url, timeout=300) as client:
        def compare(source: str) -> dict:
            r = client.post("/compare", json={
                "ref_kernel": {"source_code": REF.format(tag=uuid.uuid4().hex),
                               "kernel_type": "torch"},
                "custom_kernel": {"source_code": source, "kernel_type": "torch"},
                "num_trials": 20, "num_correct_trials": 3})
            assert r.status_code in (200, 422), r.text
            return r.json()["kernel_exec_result"]

        compare(ENDINGS["correct"][0])  # the server's own descriptors (pools, logs) open
        baseline = count_open(server.proc.pid)
        for name, (source, outcome) in ENDINGS.items():
            for _ in range(3):
                result = compare(source)
                assert result["outcome"] == outcome, (name, result)
                if name == "raises once timing starts":  # past the 3 trials, whatever the pace
                    assert "while timing" in result["runtime_error"], result
        # a finished job's log and its workers' pipes close a moment after its answer, and an
        # idle judge's channels once it has lingered: a leak is what is still open after that
        deadline = time.monotonic() + LINGER_S + 10
        while (left := count_open(server.proc.pid)) > baseline and time.monotonic() < deadline:
            time.sleep(0.1)
    # memfds and exported-memory files are what a leak would add, one or more per job
    leaked = [d for d in open_descriptors(server.proc.pid) if "memfd" in d or "kes" in d]
    assert left <= baseline, (left, baseline, leaked)
