"""A result says where its job's time went: the timing run by part (``timing_figures.spent_ms``),
the judge's trials and audit by step (``judge_spent_ms``) and the server's requests and its own
steps around a timing (``worker_calls``, ``server.*``). The parts account for the request they
split: never more than its wall time, and most of it."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.e2e

REF = """
class Model(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(64, 512)]


def get_init_inputs():
    return []
"""


def test_a_comparisons_parts_add_up_to_the_requests_they_split(client: httpx.Client) -> None:
    r = client.post("/compare", json={
        "ref_kernel": {"source_code": REF, "kernel_type": "torch"},
        "custom_kernel": {"source_code": REF.replace("class Model", "class ModelNew"),
                          "kernel_type": "torch"},
        "num_trials": 60, "num_correct_trials": 3, "reuse_reference": False})
    assert r.status_code == 200, r.text
    result = r.json()["kernel_exec_result"]
    assert result["outcome"] == "success", result
    meta = result["metadata"]
    calls = meta["worker_calls"]
    timing = meta["timing_figures"]["spent_ms"]
    judged = {"inputs", "samples", "nulls", "keep", "warm_up"}
    assert judged <= set(timing), timing
    # the timing run's parts are the judge's wall inside the time_kernel request
    wall = calls["custom.time_kernel"]["ms"]
    assert 0.5 * wall <= sum(timing.values()) <= wall, (timing, wall)
    # samples and null calls: 60 samples, a null call after every fourth: never more null
    # calls' time than samples' time
    assert timing["nulls"] <= timing["samples"], timing
    trials = {k: v for k, v in meta["judge_spent_ms"].items() if k.startswith("trials.")}
    assert {"trials.inputs", "trials.call", "trials.check", "trials.read"} <= set(trials), trials
    assert sum(trials.values()) <= calls["custom.trials"]["ms"], (trials, calls)
    assert {"server.settle", "server.alone", "server.alone_end"} <= set(calls), calls


def test_an_evaluations_timing_parts_fit_inside_its_timing_request(
        client: httpx.Client) -> None:
    r = client.post("/evaluate", json={
        "kernel": {"source_code": REF, "kernel_type": "torch"}, "num_trials": 40})
    assert r.status_code == 200, r.text
    meta = r.json()["kernel_exec_result"]["metadata"]
    timing = meta["timing_figures"]["spent_ms"]
    assert {"warm_up", "samples"} <= set(timing), timing
    wall = meta["worker_calls"]["kernel.time_self"]["ms"]
    assert 0.5 * wall <= sum(timing.values()) <= wall, (timing, wall)
