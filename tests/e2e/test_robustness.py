"""/compare with ``robustness`` on, through the real server: a kernel that is right only near
its trials' N(0, 1) inputs passes the trials and is caught by a robustness case, its honest
twin passes every case, for a KernelBench ``get_inputs()`` problem (with other sizes declared)
and an IOContract problem alike; with robustness off the result has no robustness block."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.e2e

SOFTMAX = ("TAG = '{tag}'\n\n"
           "class Model(torch.nn.Module):\n"
           "    def forward(self, x):\n        return torch.softmax(x, dim=-1)\n\n"
           "def get_inputs():\n    return [torch.randn(32, 256)]\n\n"
           "def get_init_inputs():\n    return []\n\n"
           "def get_robustness_inputs():\n    return [[torch.randn(3, 1000)]]\n")
SOFTMAX_HONEST = ("class ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
                  "        e = torch.exp(x - x.amax(dim=-1, keepdim=True))\n"
                  "        return e / e.sum(dim=-1, keepdim=True)\n")
# exp without the row's maximum taken out first: right for inputs of N(0, 1)'s size, NaN
# where exp overflows (x > 88)
SOFTMAX_NAIVE = ("class ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
                 "        e = torch.exp(x)\n        return e / e.sum(dim=-1, keepdim=True)\n")

N = 2048
TANH_IO = {"args": [
    {"name": "x", "type": "tensor", "role": "input",
     "tensor_spec": {"shape": [N], "dtype": "float32", "init": {"kind": "randn", "seed": 3}}},
    {"name": "out", "type": "tensor", "role": "output",
     "tensor_spec": {"shape": [N], "dtype": "float32"}},
]}
TANH = "TAG = '{tag}'\n\ndef tanh(x):\n    return torch.tanh(x)\n"
TANH_HONEST = "def tanh(x):\n    return torch.tanh(x)\n"
# tanh by its textbook formula: NaN once exp(2x) overflows
TANH_TEXTBOOK = "def tanh(x):\n    e = torch.exp(2 * x)\n    return (e - 1) / (e + 1)\n"


def compare(client: httpx.Client, ref: dict[str, Any], custom: dict[str, Any],
            **params: Any) -> dict[str, Any]:
    r = client.post("/compare", json={"ref_kernel": ref, "custom_kernel": custom,
                                      "num_trials": 5, "num_correct_trials": 2, **params})
    assert r.status_code == 200, r.text
    answer = r.json()
    result = answer["kernel_exec_result"]
    assert result["outcome"] == "success" and result["correctness"] is True, result
    # (where its time went, with the result it belongs to)
    result["stage_timings"] = answer["stage_timings"]
    return result


def statuses(result: dict[str, Any]) -> dict[str, str]:
    return {case["name"]: case["status"] for case in result["metadata"]["robustness"]["cases"]}


def torch_kernel(source: str, **extra: Any) -> dict[str, Any]:
    return {"source_code": source, "kernel_type": "torch", **extra}


def test_a_kernelbench_softmax_without_its_max_taken_out_is_caught_and_its_twin_passes(
        client: httpx.Client) -> None:
    ref = torch_kernel(SOFTMAX.format(tag=uuid.uuid4().hex))
    naive = compare(client, ref, torch_kernel(SOFTMAX_NAIVE), robustness=True)
    report = naive["metadata"]["robustness"]
    assert statuses(naive)["scale_1e3"] == "failed", report
    assert not report["all_passed"] and report["failed"] >= 1
    # the declared other size is run, and the naive kernel is right there (N(0, 1) again)
    assert report["other_shapes"] == "1 declared by get_robustness_inputs()"
    assert statuses(naive)["shapes_1"] == "passed"
    failing = next(c for c in report["cases"] if c["name"] == "scale_1e3")
    assert "nan" in failing["reason"].lower(), failing
    assert not naive["integrity"]["suspicious"]
    assert naive["stage_timings"]["robustness"] > 0

    honest = compare(client, ref, torch_kernel(SOFTMAX_HONEST), robustness=True)
    report = honest["metadata"]["robustness"]
    assert report["all_passed"] and report["failed"] == report["skipped"] == 0, report
    assert set(statuses(honest)) == {"scale_1e-3", "scale_1e3", "uniform", "outliers",
                                     "zeros", "shapes_1"}
    for case in report["cases"]:
        assert case["max_abs_error"] is not None and case["max_abs_error"] <= case["atol"] \
            + case["rtol"], case

    # off by default: nothing of it in the result
    plain = compare(client, ref, torch_kernel(SOFTMAX_HONEST))
    assert "robustness" not in plain["metadata"]
    assert "robustness" not in plain["stage_timings"]


def test_an_iocontract_tanh_by_its_textbook_formula_is_caught_and_its_twin_passes(
        client: httpx.Client) -> None:
    meta = {"function_name": "tanh"}
    ref = torch_kernel(TANH.format(tag=uuid.uuid4().hex), io=TANH_IO, metadata=meta)
    textbook = compare(client, ref, torch_kernel(TANH_TEXTBOOK, io=TANH_IO, metadata=meta),
                       robustness=True)
    got = statuses(textbook)
    assert got["scale_1e3"] == "failed" and got["zeros"] == "passed", got
    assert "IOContract problem" in textbook["metadata"]["robustness"]["other_shapes"]

    honest = compare(client, ref, torch_kernel(TANH_HONEST, io=TANH_IO, metadata=meta),
                     robustness=True)
    assert set(statuses(honest).values()) == {"passed"}, honest["metadata"]["robustness"]
