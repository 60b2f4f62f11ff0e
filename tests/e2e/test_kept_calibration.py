"""A judge's next candidates are calibrated by the null call it measured in an earlier pairing
(while that figure is young), on the real server with real workers: the result says which
calibration it was judged by, an honest candidate is unflagged either way, and a kernel that
rescales its own clock gains nothing against a kept calibration: the figure is the judge's."""

from __future__ import annotations

import json
import statistics
from typing import Any

import pytest

from orchestration.flows.compare import CPU_UNKEPT
from orchestration.references import KEEP_CALIBRATION_S
from tests.adversarial.cheats.timing_rebound_timer import SOURCE as REBOUND_TIMER
from tests.conftest import Server

pytestmark = pytest.mark.e2e

REF = ("class Model(torch.nn.Module):\n    def forward(self, a, b):\n        return a @ b\n\n"
       "def get_inputs():\n    return [torch.randn(1024, 1024), torch.randn(1024, 1024)]\n\n"
       "def get_init_inputs():\n    return []\n")
HONEST = REF.replace("class Model", "class ModelNew")


def batch(server: Server, sources: list[str]) -> list[dict[str, Any]]:
    import httpx

    body = {"ref_kernel": {"source_code": REF, "kernel_type": "torch"},
            "custom_kernels": [{"source_code": s, "kernel_type": "torch"} for s in sources],
            "num_trials": 10, "num_correct_trials": 2}
    with httpx.stream("POST", f"{server.url}/compare/batch", json=body, timeout=600) as r:
        assert r.status_code == 200, r.read()
        lines = [json.loads(text) for text in r.iter_lines() if text]
    answers = sorted(lines[:-1], key=lambda line: line["index"])
    return [{**a["response"]["kernel_exec_result"], "job_id": a["job_id"]} for a in answers]


def test_a_batchs_candidates_say_which_calibration_judged_them_and_a_cheat_gains_nothing(
        server_factory: Any) -> None:
    # one job at a time: the batch's candidates meet one judge in turn
    server = server_factory(MAX_WORKERS="1")
    results = batch(server, [HONEST, HONEST, REBOUND_TIMER, HONEST])
    assert [r["outcome"] for r in results] == ["success"] * 4, results
    calibration = [r["metadata"]["judge_calibration"] for r in results]
    # the reference's own timing pairing measures, in the first candidate's job, which keeps
    # that figure whatever its age; the candidates' pairings after it (a job's length later:
    # well under a second) are calibrated by it, untimed, unless the host was slow enough to
    # age it, or (CPU mode) each pairing measures its own
    for result, seen in zip(results, calibration):
        if seen["kept"]:
            assert seen["age_ms"] >= 0, calibration
            assert seen["age_ms"] <= KEEP_CALIBRATION_S * 1e3 or \
                seen["taken_by_job"] == result["job_id"], calibration
        else:
            assert "older than" in seen["not_kept"] or CPU_UNKEPT in seen["not_kept"], \
                calibration
    assert not any(r["integrity"]["suspicious"] for r in results), \
        [r["integrity"] for r in results]
    honest = statistics.median(results[i]["runtime_stats"]["median"] for i in (0, 1, 3))
    # its own clock at a quarter of the truth moves nothing the judge publishes (a wide band:
    # two processes share a 2-core host)
    assert results[2]["runtime_stats"]["median"] >= 0.6 * honest, results[2]["runtime_stats"]
