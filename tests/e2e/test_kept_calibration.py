"""A judge's next candidates are calibrated by the null call it measured in an earlier pairing
(while that figure is young), on the real server with real workers: the result says which
calibration it was judged by, an honest candidate is unflagged either way, and a cheat that
rescales its own clock is caught against a kept calibration as against a fresh one."""

from __future__ import annotations

import json
from typing import Any

import pytest

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
    return [a["response"]["kernel_exec_result"] for a in answers]


def test_a_batchs_later_candidates_are_judged_by_the_kept_calibration_and_a_cheat_still_caught(
        server_factory: Any) -> None:
    # one job at a time: the batch's candidates meet one judge in turn
    server = server_factory(MAX_WORKERS="1")
    results = batch(server, [HONEST, HONEST, REBOUND_TIMER, HONEST])
    assert [r["outcome"] for r in results] == ["success"] * 4, results
    calibration = [r["metadata"]["judge_calibration"] for r in results]
    # the first pairing measures; the next one (a job's length later: 0.6 s on a 2-core CPU)
    # is calibrated by that figure, untimed, unless the host was slow enough to age it
    assert calibration[0]["kept"] is False and "not_kept" not in calibration[0], calibration
    assert calibration[1]["kept"] is True or "older than" in calibration[1]["not_kept"], \
        calibration
    for seen in calibration:
        if seen["kept"]:
            assert 0 <= seen["age_ms"] <= KEEP_CALIBRATION_S * 1e3, calibration
    honest = [results[i] for i in (0, 1, 3)]
    assert not any(r["integrity"]["suspicious"] for r in honest), [r["integrity"] for r in honest]
    cheat = results[2]
    assert cheat["integrity"]["suspicious"], cheat["integrity"]
    assert any(c.startswith("measured again") for c in cheat["integrity"]["checks"])
    # a reading measured again ends the kept figure: the candidate after it measures anew
    assert calibration[3]["kept"] is False and "not_kept" not in calibration[3], calibration
    assert calibration[3]["taken_by_job"] != calibration[0]["taken_by_job"], calibration
