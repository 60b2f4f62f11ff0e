"""Timed samples the judge kept (its own copies, picked after they ran) are checked against
the reference on the same inputs, so a kernel that computes only when it is checked fails,
whether the reference's figure is new or reused; an honest kernel's result says which of its
samples were checked."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.adversarial.cheats.timing_mode_stack import UNDER_TIMING

pytestmark = pytest.mark.e2e

# Each test's reference is new to the server (a unique constant), so the first comparison
# runs it and the second reuses it. Milliseconds of work on a CPU: with one or five samples,
# a kernel of microseconds reads whatever the host's scheduler did (an honest self-comparison
# once read 14x on a busy 2-core host, which the speedup review flags).
REF = ("TAG = '{tag}'\n\n"
       "class Model(torch.nn.Module):\n    def forward(self, a, b):\n        return a @ b + 1\n\n"
       "def get_inputs():\n    return [torch.randn(512, 512), torch.randn(512, 512)]\n\n"
       "def get_init_inputs():\n    return []\n")
HONEST = ("class ModelNew(torch.nn.Module):\n    def forward(self, a, b):\n"
          "        return torch.addmm(torch.ones(1, device=a.device), a, b)\n")
# Right when called by a check, wrong under the timing loop (told apart by the call stack).
TIMING_MODE = UNDER_TIMING + """

class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        if _under_timing():
            return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
        return a @ b + 1
"""
# Writes its input in place, as does its reference: every sample starts from fresh inputs, so
# the judge can make a kept sample's inputs again and check it.
INPLACE_REF = ("TAG = '{tag}'\n\n"
               "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x.mul_(2)\n\n"
               "def get_inputs():\n    return [torch.randn(4096)]\n\n"
               "def get_init_inputs():\n    return []\n")
INPLACE = "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        x *= 2\n        return x\n"


def compare(client: httpx.Client, ref: str, custom: str, trials: int) -> dict[str, Any]:
    r = client.post("/compare", json={
        "ref_kernel": {"source_code": ref, "kernel_type": "torch"},
        "custom_kernel": {"source_code": custom, "kernel_type": "torch"},
        "num_trials": trials, "num_correct_trials": 2})
    assert r.status_code in (200, 422), r.text
    return r.json()


def kernel_result(answer: dict[str, Any]) -> dict[str, Any]:
    return answer["kernel_exec_result"]


@pytest.mark.parametrize("trials", [5, 1], ids=["five-samples", "one-sample"])
def test_an_honest_kernels_timed_samples_are_checked_whether_the_reference_runs_or_is_reused(
        client: httpx.Client, trials: int) -> None:
    ref = REF.format(tag=uuid.uuid4().hex)
    for reused in (False, True):
        result = kernel_result(compare(client, ref, HONEST, trials))
        assert result["outcome"] == "success", result
        assert result["metadata"]["reference_reused"] is reused
        audit = result["metadata"]["timed_sample_audit"]
        assert audit["audited"] is True and audit["samples"] == trials, audit
        assert audit["checked"] and all(0 <= i < trials for i in audit["checked"]), audit
        # every sample is kept when there are few; at least two are checked
        assert len(set(audit["checked"])) == len(audit["checked"]), audit
        assert min(2, trials) <= len(audit["checked"]) <= trials, audit
        assert not result["integrity"]["suspicious"], result["integrity"]["reasons"]


@pytest.mark.parametrize("trials", [5, 1], ids=["five-samples", "one-sample"])
def test_a_kernel_that_computes_only_when_checked_fails_whether_the_reference_runs_or_is_reused(
        client: httpx.Client, trials: int) -> None:
    ref = REF.format(tag=uuid.uuid4().hex)
    first = kernel_result(compare(client, ref, HONEST, trials))  # records the reference
    assert first["outcome"] == "success" and not first["metadata"]["reference_reused"]
    for _ in range(2):  # the second comparison reuses the reference
        result = kernel_result(compare(client, ref, TIMING_MODE, trials))
        assert result["outcome"] == "incorrect", result
        assert result["validation_error"].startswith("timed sample "), result["validation_error"]
        assert "differ beyond" in result["validation_error"]
        assert result["integrity"]["suspicious"] is True


def test_an_in_place_kernels_timed_samples_are_checked_too(client: httpx.Client) -> None:
    # A 20 us kernel: with three samples, a moment of load on a 2-core host (twice: the first
    # reading and the one taken again) once read 1.2 ms per call beyond the judge's 1 ms band.
    # Twenty give the median and the judge's spread term something to stand on.
    result = kernel_result(compare(client, INPLACE_REF.format(tag=uuid.uuid4().hex), INPLACE, 20))
    assert result["outcome"] == "success", result
    audit = result["metadata"]["timed_sample_audit"]
    assert audit["audited"] is True, audit
    assert not result["integrity"]["suspicious"], result["integrity"]


# A large output (kept whole up to 256 MB; past that, as values at random positions: see the
# unit tests of judge.clock.KeptSamples).
LARGE_REF = ("TAG = '{tag}'\n\n"
             "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n\n"
             "def get_inputs():\n    return [torch.randn(4_200_000)]\n\n"
             "def get_init_inputs():\n    return []\n")
LARGE_HONEST = "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x + x\n"
LARGE_TIMING_MODE = TIMING_MODE.replace(
    "def forward(self, a, b):\n        if _under_timing():\n"
    "            return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)\n"
    "        return a @ b + 1",
    "def forward(self, x):\n        if _under_timing():\n            return x\n        return x * 2")


def test_a_large_outputs_timed_samples_are_checked(client: httpx.Client) -> None:
    assert LARGE_TIMING_MODE != TIMING_MODE
    ref = LARGE_REF.format(tag=uuid.uuid4().hex)
    honest = kernel_result(compare(client, ref, LARGE_HONEST, 3))
    assert honest["outcome"] == "success", honest
    assert honest["metadata"]["timed_sample_audit"]["audited"] is True
    cheat = kernel_result(compare(client, ref, LARGE_TIMING_MODE, 3))
    assert cheat["outcome"] == "incorrect", cheat
    assert cheat["validation_error"].startswith("timed sample "), cheat["validation_error"]
