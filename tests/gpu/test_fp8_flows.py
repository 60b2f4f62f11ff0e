"""float8 on the GPU: an fp8 e4m3 scaled matmul (``torch._scaled_mm``) and an fp8 quantisation
kernel compared through the real server, each correct against its reference and its wrong
twin incorrect; and the comparator on CUDA float8 tensors, which have no subtraction, ``abs``
or ``isfinite`` of their own."""

from __future__ import annotations

import httpx
import pytest
import torch

pytestmark = [pytest.mark.gpu]

M, K, N = 256, 512, 256  # multiples of 16, as _scaled_mm requires


def kernel(source: str, io: dict | None = None) -> dict:
    k: dict = {"source_code": source, "kernel_type": "torch"}
    if io:
        k["io"] = io
    return k


def fp8_arg(name: str, shape: list[int], seed: int) -> dict:
    return {"name": name, "type": "tensor", "role": "input", "tensor_spec": {
        "shape": shape, "dtype": "float8_e4m3fn", "init": {"kind": "randn", "seed": seed}}}


def scale_arg(name: str, seed: int, low: float, high: float) -> dict:
    """A per-tensor scale: a float32 tensor of one element, as _scaled_mm takes it."""
    return {"name": name, "type": "tensor", "role": "input", "tensor_spec": {
        "shape": [1], "dtype": "float32",
        "init": {"kind": "uniform", "seed": seed, "low": low, "high": high}}}


# b is given transposed (bt, N x K, row-major) so that bt.t() is the column-major K x N
# operand _scaled_mm requires: the arena hands every input over contiguous.
SCALED_MM_IO = {"args": [fp8_arg("a", [M, K], 1), fp8_arg("bt", [N, K], 2),
                         scale_arg("scale_a", 3, 0.5, 2.0), scale_arg("scale_b", 4, 0.25, 0.5)]}
DEQUANTIZED_MATMUL = (
    "class Model(torch.nn.Module):\n"
    "    def forward(self, a, bt, scale_a, scale_b):\n"
    "        return ((a.float() * scale_a) @ (bt.float() * scale_b).t()).to(torch.bfloat16)\n")
SCALED_MM = (
    "class Model(torch.nn.Module):\n"
    "    def forward(self, a, bt, scale_a, scale_b):\n"
    "        return torch._scaled_mm(a, bt.t(), scale_a=scale_a, scale_b=scale_b,\n"
    "                                out_dtype=torch.bfloat16)\n")
SCALED_MM_WITHOUT_SCALE_B = SCALED_MM.replace("scale_b=scale_b", "scale_b=torch.ones_like(scale_b)")

QUANTIZE = (
    "class Model(torch.nn.Module):\n"
    "    def forward(self, x):\n"
    "        scale = x.abs().amax() / 448.0\n"
    "        q = (x / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)\n"
    "        return q, scale.reshape(1)\n"
    "def get_inputs():\n    return [torch.randn(1024, 1024)]\n"
    "def get_init_inputs():\n    return []\n")
QUANTIZE_NEW = (
    "class ModelNew(torch.nn.Module):\n"
    "    def forward(self, x):\n"
    "        amax = x.abs().amax()\n"
    "        q = (x * (448.0 / amax)).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)\n"
    "        return q, (amax / 448.0).reshape(1)\n")
QUANTIZE_TO_E4M3FNUZ_RANGE = QUANTIZE_NEW.replace("448.0", "240.0")


def compare(client: httpx.Client, ref: dict, custom: dict) -> dict:
    r = client.post("/compare", json={"ref_kernel": ref, "custom_kernel": custom,
                                      "num_trials": 20}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()["kernel_exec_result"]


@pytest.mark.e2e
def test_an_fp8_scaled_matmul_is_correct_and_its_wrong_scale_twin_incorrect(
        client: httpx.Client) -> None:
    ref = kernel(DEQUANTIZED_MATMUL, SCALED_MM_IO)
    result = compare(client, ref, kernel(SCALED_MM, SCALED_MM_IO))
    assert result["correctness"] is True, result
    wrong = compare(client, ref, kernel(SCALED_MM_WITHOUT_SCALE_B, SCALED_MM_IO))
    assert wrong["correctness"] is False and wrong["outcome"] == "incorrect", wrong
    assert wrong["validation_error"].startswith("correctness trial ")
    assert f"elements of bfloat16[{M}, {N}] differ" in wrong["validation_error"]


@pytest.mark.e2e
def test_an_fp8_quantisation_kernel_returning_float8_e4m3fn_is_correct_and_its_twin_not(
        client: httpx.Client) -> None:
    result = compare(client, kernel(QUANTIZE), kernel(QUANTIZE_NEW))
    assert result["correctness"] is True, result
    wrong = compare(client, kernel(QUANTIZE), kernel(QUANTIZE_TO_E4M3FNUZ_RANGE))
    assert wrong["correctness"] is False and wrong["outcome"] == "incorrect", wrong
    assert "elements of float8_e4m3fn[1024, 1024] differ" in wrong["validation_error"]


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e4m3fnuz,
                                   torch.float8_e5m2, torch.float8_e5m2fnuz], ids=str)
def test_cuda_float8_outputs_compare_a_unit_off_as_equal_and_nan_or_wrong_as_different(
        dtype: torch.dtype) -> None:
    from validation.compare import compare_outputs

    want = (torch.randn(4096, device="cuda") * 8).to(dtype)
    # the next bit pattern: a unit in the last place further from zero, kept finite
    bits = want.view(torch.uint8)
    finite_max = torch.tensor(torch.finfo(dtype).max).to(dtype).view(torch.uint8).item()
    up = torch.where((bits & 0x7F) < (finite_max & 0x7F), bits + 1, bits)
    assert compare_outputs([up.view(dtype)], [want]) is None
    assert compare_outputs([(want.float() * 1.5).to(dtype)], [want]) is not None
    with_nan = want.clone()
    with_nan[100] = float("nan")
    message = compare_outputs([with_nan], [want])
    assert message is not None and message.startswith("output: 1 of 4096")
