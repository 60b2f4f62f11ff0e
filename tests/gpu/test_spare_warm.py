"""SPARE_WARM on a CUDA GPU, through the real server: spares that warm cuBLAS (the default)
and spares that warm nothing beside their context both judge a matmul correctly, and the
cuBLAS kernels a cold worker's first call loads stay out of the number (the median matches
triton's do_bench in this process)."""

from __future__ import annotations

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


@pytest.fixture(scope="module", params=["none", "cublas"])
def cold_server(tmp_path_factory: pytest.TempPathFactory,
                request: pytest.FixtureRequest) -> Iterator[Server]:
    server = start_server(Path(tmp_path_factory.mktemp(f"spare-warm-{request.param}")),
                          {"SPARE_WARM": request.param})
    try:
        yield server
    finally:
        server.stop()


def test_spares_judge_a_matmul_and_time_it_as_do_bench_does_whatever_they_warm(
        cold_server: Server, request: pytest.FixtureRequest) -> None:
    import torch
    import triton.testing

    with httpx.Client(base_url=cold_server.url, timeout=300) as client:
        r = client.post("/compare", json={"ref_kernel": kernel(MATMUL, IO),
                                          "custom_kernel": kernel(MATMUL, IO),
                                          "num_trials": 50, "timeout": 300})
    assert r.status_code == 200, r.text
    result = r.json()["kernel_exec_result"]
    assert result["correctness"] is True, result
    assert not result["integrity"]["suspicious"], result["integrity"]
    median = result["runtime_stats"]["median"]
    a = torch.randn(N, N, device="cuda")
    b = torch.randn(N, N, device="cuda")
    cold_server.wait_for_spares()
    bench = triton.testing.do_bench(lambda: a @ b, warmup=100, rep=500, return_mode="median")
    print(f"\nmatmul {N}² fp32, SPARE_WARM={request.node.callspec.params['cold_server']}: server {median:.4f} ms, "
          f"do_bench {bench:.4f} ms, ratio {median / bench:.3f}")
    assert abs(median - bench) / bench < 0.10
