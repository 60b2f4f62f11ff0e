"""A comparison read again after its first reading disagreed with the judge's clock is judged
against a calibration taken again just before it, by a fresh process, with the kernel's
process stopped meanwhile: the second reading's verdict says so, and a cheat that scales its
own clock is still caught on it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.adversarial.cheats.timing_rebound_timer import SOURCE as REBOUND_TIMER

pytestmark = pytest.mark.e2e

REF = ("class Model(torch.nn.Module):\n    def forward(self, a, b):\n        return a @ b\n\n"
       "def get_inputs():\n    return [torch.randn(1024, 1024), torch.randn(1024, 1024)]\n\n"
       "def get_init_inputs():\n    return []\n")


def compare(client: httpx.Client, custom: str) -> dict[str, Any]:
    r = client.post("/compare", json={
        "ref_kernel": {"source_code": REF, "kernel_type": "torch"},
        "custom_kernel": {"source_code": custom, "kernel_type": "torch"},
        "num_trials": 10, "num_correct_trials": 2})
    assert r.status_code == 200, r.text
    return r.json()["kernel_exec_result"]


def test_a_flagged_reading_is_read_again_against_a_fresh_calibration_and_stays_flagged(
        client: httpx.Client) -> None:
    """Every in-process figure scaled to 25%: the first reading is flagged, the server
    calibrates the judge's clock again on a fresh process and reads again, and that reading,
    judged against the new calibration, is flagged too."""
    result = compare(client, REBOUND_TIMER)
    assert result["outcome"] == "success", result
    integrity = result["integrity"]
    assert integrity["suspicious"], integrity
    again = [c for c in integrity["checks"] if c.startswith("measured again")]
    assert again and "calibrated again just before, on a fresh process" in again[0], integrity
    figures = result["metadata"]["timing_figures"]
    assert figures["judge_null_call_before_ms"] is not None
