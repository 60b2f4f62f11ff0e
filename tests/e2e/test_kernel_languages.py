"""The kernel languages beside torch and Triton on the real server: /health lists each with its
version and whether it runs here, and a kernel written in one that cannot run here is a
compile_error that names the language and what is missing."""

from __future__ import annotations

import httpx
import pytest

from shared.languages import LANGUAGES
from tests.conftest import cuda_available

pytestmark = pytest.mark.e2e

TILELANG_RELU = """
import tilelang
import tilelang.language as T


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""
X_IO = {"args": [{"name": "x", "type": "tensor", "role": "input",
                  "tensor_spec": {"shape": [256], "dtype": "float32",
                                  "init": {"kind": "randn", "seed": 1}}}]}


def test_health_lists_every_kernel_language_with_its_version_and_availability(
        client: httpx.Client) -> None:
    health = client.get("/health").json()
    listed = {item["name"]: item for item in health["languages"]}
    assert set(listed) == {lang.name for lang in LANGUAGES}
    for lang in LANGUAGES:
        item = listed[lang.name]
        assert item["module"] == lang.module and item["distribution"] == lang.distribution
        if not item["available"]:
            assert item["reason"], item
        if item["version"] is None:
            assert "not installed" in item["reason"]
        if health["device"] == "cpu":  # none runs without a CUDA GPU
            assert not item["available"]


@pytest.mark.skipif(cuda_available(), reason="the CPU server's answer")
def test_a_kernel_in_a_language_that_cannot_run_here_is_a_compile_error_naming_it(
        client: httpx.Client) -> None:
    r = client.post("/evaluate", json={
        "kernel": {"source_code": TILELANG_RELU, "kernel_type": "torch", "io": X_IO},
        "num_trials": 1})
    assert r.status_code == 200, r.text
    result = r.json()["kernel_exec_result"]
    assert result["outcome"] == "compile_error" and result["compiled"] is False
    error = result["compilation_error"]
    assert error.startswith("this kernel is written in TileLang (it imports tilelang)"), error
    assert "CPU mode" in error or "kernel-eval-server[tilelang]" in error, error


@pytest.mark.skipif(cuda_available(), reason="the CPU server's answer")
def test_a_comparison_whose_candidate_uses_a_missing_language_is_a_compile_error(
        client: httpx.Client) -> None:
    ref = "class Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
    r = client.post("/compare", json={
        "ref_kernel": {"source_code": ref, "kernel_type": "torch", "io": X_IO},
        "custom_kernel": {"source_code": TILELANG_RELU, "kernel_type": "torch", "io": X_IO},
        "num_trials": 3})
    assert r.status_code == 200, r.text
    result = r.json()["kernel_exec_result"]
    assert result["outcome"] == "compile_error", result
    assert "TileLang" in result["compilation_error"]
