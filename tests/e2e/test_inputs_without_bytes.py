"""A comparison whose inputs hold no bytes (an empty tensor) is judged and timed like any
other: in CPU mode the kernel's process reads a sample's inputs before its clock starts
(harness.timer.Timer.warm_pages), and a read of nothing must not fail the kernel.

Seen: an identical pair of ``x * 2`` on ``torch.zeros(0)`` answered runtime_error ("broke the
harness's protocol while calibrating the judge's clock").
"""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.e2e

SOURCE = ("class {name}(torch.nn.Module):\n    def forward(self, x, scale):\n"
          "        return x * scale\n\n"
          "def get_inputs():\n    return [torch.zeros(0), {scale}]\n\n"
          "def get_init_inputs():\n    return []\n")


def test_an_identical_pair_on_an_empty_input_succeeds_and_is_timed(client: httpx.Client) -> None:
    r = client.post("/compare", json={
        "ref_kernel": {"source_code": SOURCE.format(name="Model", scale=2.0),
                       "kernel_type": "torch"},
        "custom_kernel": {"source_code": SOURCE.format(name="ModelNew", scale=2.0),
                          "kernel_type": "torch"},
        "num_trials": 20})
    assert r.status_code == 200, r.text
    result = r.json()["kernel_exec_result"]
    assert result["outcome"] == "success", result
    assert result["runtime_stats"]["num_samples"] == 20
    assert result["metadata"]["speedup"] > 0
