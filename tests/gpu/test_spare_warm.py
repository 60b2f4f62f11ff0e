"""What spares warm, on a CUDA GPU through the real server: a source that may call cuBLAS gets
a spare that warmed it, others one that did not; a matmul is judged correctly and the cuBLAS
kernels a first call loads stay out of the number (the median matches triton's do_bench in
this process). Results say what each process warmed, and which of the harness's paths it
rehearsed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, start_server
from tests.gpu.test_gpu_flows import kernel, tensor_arg

pytestmark = [pytest.mark.gpu, pytest.mark.e2e]

N = 2048
MATMUL = "class Model(torch.nn.Module):\n    def forward(self, a, b):\n        return a @ b\n"
IO = {"args": [tensor_arg("a", [N, N], 1), tensor_arg("b", [N, N], 2)]}


RELU = "class Model(torch.nn.Module):\n    def forward(self, a):\n        return torch.relu(a)\n"
# what the matmul's processes and a relu's process warm
WARMED = ("cublas", "base")


@pytest.fixture(scope="module")
def cold_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # six spares, the first made with and without cuBLAS in turn: three that warmed it, one
    # for each process of a comparison (its judge, its reference's, its candidate's)
    server = start_server(Path(tmp_path_factory.mktemp("spare-warm")), {"SPARES_PER_GPU": "6"})
    try:
        yield server
    finally:
        server.stop()


def test_spares_judge_a_matmul_and_time_it_as_do_bench_does(cold_server: Server) -> None:
    import torch
    import triton.testing

    cold_server.wait_for_spares()  # (a job that finds none ready takes the first of any kind)
    with httpx.Client(base_url=cold_server.url, timeout=300) as client:
        r = client.post("/compare", json={"ref_kernel": kernel(MATMUL, IO),
                                          "custom_kernel": kernel(MATMUL, IO),
                                          "num_trials": 50, "timeout": 300})
    assert r.status_code == 200, r.text
    result = r.json()["kernel_exec_result"]
    assert result["correctness"] is True, result
    assert not result["integrity"]["suspicious"], result["integrity"]
    assert result["metadata"]["worker_warmed"] == WARMED[0]
    assert r.json()["ref_exec_result"]["metadata"]["worker_warmed"] == WARMED[0]
    # a comparison's two processes rehearsed a comparison (a spare made for /evaluate would
    # meet the pairing's first steps cold)
    assert result["metadata"]["worker_rehearsed"] == "all"
    assert r.json()["ref_exec_result"]["metadata"]["worker_rehearsed"] == "all"
    median = result["runtime_stats"]["median"]
    a = torch.randn(N, N, device="cuda")
    b = torch.randn(N, N, device="cuda")
    cold_server.wait_for_spares()
    bench = triton.testing.do_bench(lambda: a @ b, warmup=100, rep=500, return_mode="median")
    print(f"\nmatmul {N}² fp32: server {median:.4f} ms, "
          f"do_bench {bench:.4f} ms, ratio {median / bench:.3f}")
    assert abs(median - bench) / bench < 0.10


def test_a_job_that_multiplies_no_matrices_gets_a_spare_that_did_not_warm_cublas(
        cold_server: Server) -> None:
    spares = cold_server.wait_for_spares()
    results = []
    with httpx.Client(base_url=cold_server.url, timeout=300) as client:
        for _ in range(2):
            r = client.post("/evaluate", json={"kernel": kernel(RELU, {"args": [
                tensor_arg("a", [1024, 1024], 1)]}), "num_trials": 20, "timeout": 300})
            assert r.status_code == 200, r.text
            result = r.json()["kernel_exec_result"]
            assert result["outcome"] == "success", result  # (no correctness verdict)
            assert result["metadata"]["worker_warmed"] == WARMED[1]
            results.append(result)
            # the taken spare's replacement is ready
            end = time.monotonic() + 120
            while time.monotonic() < end and client.get("/stats").json()["ready_workers"] < spares:
                time.sleep(0.25)
    # the first fill rehearsed everything (it serves every job); the spare made to replace
    # the one an /evaluate took rehearsed only its path: no judge, no pairing
    assert [r["metadata"]["worker_rehearsed"] for r in results] == ["all", "alone"]
