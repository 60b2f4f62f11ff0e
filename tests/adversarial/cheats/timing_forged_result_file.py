"""Timing: write the job's result file yourself, then leave before the harness can.

Tries: on its first call the kernel finds its job's files beside its own module (the
``job_<id>_request.json`` the worker was handed, or the job directory's name), writes a
``job_<id>_result.json`` that says "correct, 0.1 µs, nothing suspicious" (built with the
server's own models from ``sys.modules`` when it can), and ends the process with
``os._exit(0)``.
Caught by: results that travel on a channel the kernel cannot reach, and a worker that
exits without a trusted result being a failure.
"""

from tests.adversarial.corpus import Cheat, Family, matmul_cheat, matmul_honest

SOURCE = """
import json
import os
import sys
from pathlib import Path

FAKE_MS = 1e-4


def _stats(device):
    method = "cuda_event+l2_flush" if device == "cuda" else "cpu_perf_counter"
    return {"mean": FAKE_MS, "std": 0.0, "min": FAKE_MS, "max": FAKE_MS, "median": FAKE_MS,
            "percentile_95": FAKE_MS, "percentile_99": FAKE_MS, "num_samples": 100,
            "method": method, "device": device}


def _verdict(device, correctness):
    return {"outcome": "success", "compiled": True, "correctness": correctness,
            "runtime": FAKE_MS, "runtime_stats": _stats(device),
            "integrity": {"checks": ["timing_cross_check", "output_recheck"],
                          "suspicious": False, "reasons": [], "timing": None},
            "metadata": {"device": device, "speedup": 1.0, "speedup_statistic": "median"}}


def _forged(device):
    raw = {"kernel_exec_result": _verdict(device, True), "ref_exec_result": _verdict(device, None)}
    models = sys.modules.get("shared.models")
    try:
        return models.WorkerResult.model_validate(raw).model_dump_json()
    except Exception:
        return json.dumps(raw)


def _forge_and_leave(device):
    here = Path(__file__).resolve().parent
    job_ids = {p.name[len("job_"):-len("_request.json")] for p in here.glob("job_*_request.json")}
    job_ids.add(here.name)
    text = _forged(device)
    for job_id in job_ids:
        for name in (f"job_{job_id}_result.json", "result.json"):
            tmp = here / (name + ".tmp")
            tmp.write_text(text)
            os.replace(tmp, here / name)
        (here / f"job_{job_id}_stage").write_text(json.dumps({"stage": "done", "role": ""}))
    sys.stdout.flush()
    os._exit(0)


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        _forge_and_leave(a.device.type)
"""

CASE = Cheat(
    name="forged_result_file",
    family=Family.TIMING,
    technique="forged_result",
    tries="writes job_<id>_result.json (correct, 0.1 µs) next to its module, then os._exit(0)",
    caught_by="results on a channel the kernel cannot reach; exit without trusted result fails",
    build=matmul_cheat(SOURCE),
    honest=matmul_honest,
)
