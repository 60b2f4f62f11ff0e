"""/compare of a torch reference against a custom kernel of every type, through the real server.

For each type: a correct kernel passes, an incorrect one fails with the mismatch described, a
non-compiling one returns its compiler's message. Without a GPU, triton and multi_kernel run
(Triton's interpreter) and cuda / torch_cuda are answered with "needs a CUDA GPU".
"""

from __future__ import annotations

import re

import httpx
import pytest

from tests.conftest import cuda_available

pytestmark = pytest.mark.e2e

N = 4096


def io(*extra: dict, launch: dict | None = None) -> dict:
    args = [
        {"name": "x", "type": "tensor", "role": "input",
         "tensor_spec": {"shape": [N], "dtype": "float32", "init": {"kind": "randn", "seed": 1}}},
        {"name": "y", "type": "tensor", "role": "input",
         "tensor_spec": {"shape": [N], "dtype": "float32", "init": {"kind": "randn", "seed": 2}}},
        {"name": "out", "type": "tensor", "role": "output", "tensor_spec": {"shape": [N], "dtype": "float32"}},
        {"name": "n", "type": "int", "value": N},
        *extra,
    ]
    contract: dict = {"args": args}
    if launch:
        contract["launch"] = launch
    return contract


REFERENCE = {
    "source_code": "class Model(torch.nn.Module):\n    def forward(self, x, y):\n        return x + y\n",
    "kernel_type": "torch",
    "io": io(),
}

TRITON = """
import triton
import triton.language as tl

@triton.jit
def add_kernel(x, y, out, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) OP tl.load(y + offs, mask=mask), mask=mask)
"""
TRITON_IO = io(
    {"name": "BLOCK_SIZE", "type": "int", "value": 256, "is_meta": True},
    launch={"grid": {"x": "cdiv(n, BLOCK_SIZE)"}, "num_warps": 4},
)

CUDA = """
extern "C" __global__ void add(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] OP y[i];
}
"""
CUDA_IO = io(launch={"grid": {"x": N // 256}, "block": {"x": 256}})

TORCH_CUDA = '''
import torch
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>
__global__ void add_kernel(const float* a, const float* b, float* out, int size) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < size) out[i] = a[i] OP b[i];
}
torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    int size = a.numel();
    add_kernel<<<(size + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), size);
    return out;
}
"""
ext = load_inline(name="mixed_add", cpp_sources="torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b);",
                  cuda_sources=cuda_source, functions=["add_cuda"])

class ModelNew(torch.nn.Module):
    def forward(self, x, y):
        return ext.add_cuda(x, y)
'''

MULTI = """
import torch

def run(x, y, out):
    out.copy_(x OP y)
"""

# type: (source template, io, metadata, broken source, text the compile error must contain)
CASES = {
    "triton": (TRITON, TRITON_IO, None, TRITON.replace("mask=mask) OP", "mask=mask) OP undefined_name *"), "undefined_name"),
    "cuda": (CUDA, CUDA_IO, {"kernel_name": "add"}, CUDA.replace("x[i] OP y[i];", "x[i] OP y[i]"), "error"),
    "torch_cuda": (TORCH_CUDA, None, None, TORCH_CUDA.replace("a[i] OP b[i];", "a[i] OP b[i]"), "error"),
    "multi_kernel": (MULTI, io(), {"entry_point": "run"}, "import no_such_module\n" + MULTI, "no_such_module"),
}
GPU_ONLY = {"cuda", "torch_cuda"}


def custom(kind: str, source: str) -> dict:
    _, contract, meta, _, _ = CASES[kind]
    kernel: dict = {"source_code": source, "kernel_type": kind}
    if contract is not None:
        kernel["io"] = contract
    if meta:
        kernel["metadata"] = meta
    return kernel


def compare(client: httpx.Client, kernel: dict) -> dict:
    r = client.post("/compare", json={"ref_kernel": REFERENCE, "custom_kernel": kernel,
                                      "num_trials": 10, "timeout": 600})
    assert r.status_code == 200, r.text
    return r.json()["kernel_exec_result"]


@pytest.mark.parametrize("kind", list(CASES))
def test_correct_kernel_passes(client: httpx.Client, kind: str) -> None:
    result = compare(client, custom(kind, CASES[kind][0].replace("OP", "+")))
    if kind in GPU_ONLY and not cuda_available():
        assert result["compiled"] is False and "needs a CUDA GPU" in result["compilation_error"]
        return
    assert result["correctness"] is True, result
    assert result["runtime"] > 0


@pytest.mark.parametrize("kind", list(CASES))
def test_incorrect_kernel_fails_with_the_mismatch(client: httpx.Client, kind: str) -> None:
    if kind in GPU_ONLY and not cuda_available():
        pytest.skip("needs a CUDA GPU")
    result = compare(client, custom(kind, CASES[kind][0].replace("OP", "-")))
    assert result["outcome"] == "incorrect", result
    assert f"elements of float32[{N}] differ" in result["validation_error"]


@pytest.mark.parametrize("kind", list(CASES))
def test_broken_kernel_returns_the_compiler_message(client: httpx.Client, kind: str) -> None:
    if kind in GPU_ONLY and not cuda_available():
        pytest.skip("needs a CUDA GPU")
    _, _, _, broken, expected = CASES[kind]
    result = compare(client, custom(kind, broken.replace("OP", "+")))
    assert result["compiled"] is False and result["outcome"] == "compile_error", result
    assert expected in result["compilation_error"]
    # "line N" (Python, Triton, our torch_cuda mapping) or the compiler's own "file(N):"
    assert re.search(r"line \d+|\(\d+\): error", result["compilation_error"]), result

