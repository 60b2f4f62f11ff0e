"""Nsight Compute device metrics through the real server, on a GPU host with ncu.

Every kernel type comes back from /evaluate with metrics in the API guide's layout
(``metadata.device_metrics.original_device_metrics``), only of the job's own kernels; /compare
returns both kernels' (the reference's as ``original_device_metrics``, the custom kernel's as
``custom_device_metrics``); the timings stay CUDA-event timings.
"""

from __future__ import annotations

import httpx
import pytest

from profiling.device_metrics import CATEGORIES
from tests.e2e.test_mixed_compare import CUDA, CUDA_IO, REFERENCE, TORCH_CUDA, TRITON, TRITON_IO, io

pytestmark = [pytest.mark.gpu, pytest.mark.e2e]

RELU = {
    "source_code": "class Model(torch.nn.Module):\n    def forward(self, x, y):\n        return torch.relu(x)\n",
    "kernel_type": "torch", "io": io(),
}
# type -> (kernel, a name every profiled kernel of the job contains)
KERNELS = {
    "torch": (RELU, "elementwise"),
    "triton": ({"source_code": TRITON.replace("OP", "+"), "kernel_type": "triton", "io": TRITON_IO},
               "add_kernel"),
    "cuda": ({"source_code": CUDA.replace("OP", "+"), "kernel_type": "cuda", "io": CUDA_IO,
              "metadata": {"kernel_name": "add"}}, "add"),
    "torch_cuda": ({"source_code": TORCH_CUDA.replace("OP", "+"), "kernel_type": "torch_cuda",
                    "io": io()}, "add_kernel"),
}
# the one kernel each of these launches: its block (Triton: num_warps=4 → 128 threads)
BLOCKS = {"triton": "(128, 1, 1)", "cuda": "(256, 1, 1)", "torch_cuda": "(256, 1, 1)"}


def post(client: httpx.Client, path: str, body: dict) -> dict:
    r = client.post(path, json={"num_trials": 10, "timeout": 600, **body})
    assert r.status_code == 200, r.text
    return r.json()


def device_metrics(result: dict, key: str = "original_device_metrics") -> dict:
    layout = result["metadata"]["device_metrics"]
    assert layout is not None and key in layout, result["metadata"]
    metrics = layout[key]
    assert metrics["available"] is True, metrics["reason"]
    return metrics


def check_basic(metrics: dict, kernel_name: str) -> None:
    assert metrics["preset"] == "basic" and metrics["reason"] is None
    assert set(CATEGORIES) <= set(metrics)
    assert metrics["ncu_time_s"] > 0
    names = [k["name"] for k in metrics["kernels"]]
    assert names and all(kernel_name in name for name in names), names  # no warm-up, no flush
    sol = metrics["speed_of_light"]
    assert 0 < sol["compute_throughput_pct"] <= 100.5 and 0 < sol["memory_throughput_pct"] <= 100.5
    timing = metrics["timing_metrics"]
    assert timing["gpu_time_duration_unit"] == "ms" and 0 < timing["gpu_time_duration_sum"] < 100
    assert metrics["occupancy_metrics"]["block_size"] > 0
    assert metrics["stall_metrics"] == {}  # basic collects no warp states: absent, not zeros


@pytest.mark.parametrize("kind", list(KERNELS))
def test_evaluate_returns_the_kernels_device_metrics(client: httpx.Client, kind: str) -> None:
    kernel, name = KERNELS[kind]
    result = post(client, "/evaluate", {"kernel": kernel, "enable_device_metrics": True})
    result = result["kernel_exec_result"]
    assert result["outcome"] == "success", result
    assert result["runtime_stats"]["method"] == "cuda_event+l2_flush"  # not timed under ncu
    metrics = device_metrics(result)
    check_basic(metrics, name)
    assert metrics["clocks_locked"] is False
    if kind in BLOCKS:
        [only] = metrics["kernels"]
        assert only["block_size"] == BLOCKS[kind]


def test_compare_returns_both_kernels_metrics(client: httpx.Client) -> None:
    custom, custom_name = KERNELS["triton"]
    body = post(client, "/compare", {"ref_kernel": REFERENCE, "custom_kernel": custom,
                                     "enable_device_metrics": True})
    result = body["kernel_exec_result"]
    assert result["correctness"] is True, result
    check_basic(device_metrics(result, "original_device_metrics"), "elementwise")
    check_basic(device_metrics(result, "custom_device_metrics"), custom_name)
    ref = device_metrics(body["ref_exec_result"])
    check_basic(ref, "elementwise")


def test_full_preset_fills_every_category(client: httpx.Client) -> None:
    matmul = {
        "source_code": "class Model(torch.nn.Module):\n    def forward(self, a, b):\n        return a @ b\n",
        "kernel_type": "torch",
        "io": {"args": [
            {"name": n, "type": "tensor", "role": "input",
             "tensor_spec": {"shape": [512, 512], "dtype": "float32", "init": {"kind": "randn", "seed": s}}}
            for n, s in (("a", 1), ("b", 2))
        ]},
    }
    result = post(client, "/evaluate", {"kernel": matmul, "enable_device_metrics": True,
                                        "device_metrics_preset": "full", "lock_clocks": True})
    metrics = device_metrics(result["kernel_exec_result"])
    assert metrics["preset"] == "full" and metrics["clocks_locked"] is True
    empty = [c for c in CATEGORIES if not metrics[c]]
    assert empty == [], f"categories ncu filled nothing in: {empty}"
    roofline = metrics["roofline_metrics"]
    # a 512³ fp32 matmul without TF32: at least 2·512³ FLOPs on the FMA pipe
    assert roofline["flop_count_total"] >= 2 * 512**3 * 0.99
    assert roofline["arithmetic_intensity"] > 1
    stalls = [v for k, v in metrics["stall_metrics"].items() if k.startswith("stall_")]
    assert stalls and sum(stalls) == pytest.approx(100, abs=0.1)


def test_section_list_preset(client: httpx.Client) -> None:
    kernel, _ = KERNELS["triton"]
    result = post(client, "/evaluate", {"kernel": kernel, "enable_device_metrics": True,
                                        "device_metrics_preset": "SpeedOfLight,WarpStateStats"})
    metrics = device_metrics(result["kernel_exec_result"])
    assert metrics["sections"] == ["SpeedOfLight", "WarpStateStats"]
    assert metrics["stall_metrics"] and metrics["speed_of_light"]
    # MemoryWorkloadAnalysis was not asked for: no cache hit rates (ncu records a kernel's
    # launch statistics, block size included, whatever sections are asked for)
    assert "l1_hit_rate_pct" not in metrics["detailed_metrics"]
    assert "l2_hit_rate_pct" not in metrics["detailed_metrics"]


def test_without_device_metrics_there_are_none(client: httpx.Client) -> None:
    kernel, _ = KERNELS["torch"]
    result = post(client, "/evaluate", {"kernel": kernel, "enable_device_metrics": False})
    assert result["kernel_exec_result"]["metadata"].get("device_metrics") is None


def test_unknown_preset_is_refused(client: httpx.Client) -> None:
    kernel, _ = KERNELS["torch"]
    r = client.post("/evaluate", json={"kernel": kernel, "enable_device_metrics": True,
                                       "device_metrics_preset": "SpeedOfLight,Bogus"})
    assert r.status_code in (400, 422), r.text
    assert "Bogus" in r.text
