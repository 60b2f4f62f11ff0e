"""Probe: how cold and warm judges time one small reference (issue 26, eleventh session).

Starts a server per SPARE_WARM value named on the command line (``none``, ``cublas``), sends six
/compare/batch of two twin candidates of a 128² fp16 matmul (each batch its own reference, so
each reference is timed by a fresh judge), and prints, per candidate, the reference's figure
and method beside the candidate's, and once per batch the reference's integrity block and
timing figures. Seen on the H100 in a throughput run with SPARE_WARM=none: that reference read
host-bound at 0.1235 ms against ~0.008 ms of device time (bench/results/h100_2026-11-27c/).

    python scripts/probe_reference_regime.py none cublas > probe_ref.log
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import start_server

SOURCE = ("class {name}(torch.nn.Module):\n    def forward(self, x):\n"
          "        return x.half() @ x.half()\n\n"
          "def get_inputs():\n    return [torch.randn(128, 128)]\n\n"
          "def get_init_inputs():\n    return []\n# {tag}\n")
BATCHES = 6


def kernel(name: str, tag: str) -> dict[str, str]:
    return {"source_code": SOURCE.format(name=name, tag=tag), "kernel_type": "torch"}


def probe(warm: str) -> None:
    server = start_server(Path(tempfile.mkdtemp()), {"SPARE_WARM": warm})
    try:
        server.wait_for_spares(60, 2)
        for k in range(BATCHES):
            tag = f"{warm}{k}"  # a reference of its own: a fresh judge times it
            body = {"ref_kernel": kernel("Model", tag),
                    "custom_kernels": [kernel("ModelNew", tag)] * 2,
                    "num_trials": 20, "num_correct_trials": 2}
            with httpx.stream("POST", f"{server.url}/compare/batch", json=body,
                              timeout=300) as r:
                lines = [json.loads(text) for text in r.iter_lines() if text]
            for line in lines[:-1]:
                ref = line["response"]["ref_exec_result"]
                ker = line["response"]["kernel_exec_result"]
                print(json.dumps({
                    "warm": warm, "batch": k,
                    "ref_median": (ref.get("runtime_stats") or {}).get("median"),
                    "ref_method": (ref.get("runtime_stats") or {}).get("method"),
                    "ref_reasons": (ref.get("integrity") or {}).get("reasons"),
                    "ker_median": (ker.get("runtime_stats") or {}).get("median"),
                    "speedup": ker["metadata"].get("speedup")}))
            ref = lines[0]["response"]["ref_exec_result"]
            print("  REF", json.dumps({"integrity": ref.get("integrity"),
                                      "tf": ref.get("metadata", {}).get("timing_figures")}))
    finally:
        server.stop()


if __name__ == "__main__":
    for value in sys.argv[1:] or ["none", "cublas"]:
        probe(value)
