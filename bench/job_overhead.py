"""Per-job overhead of the server: pre-started spare workers against cold workers.

Starts the real server with one device slot, SPARE_WORKERS=true and then false (the baseline:
a fresh process per job that must import torch first), sends the same trivial /evaluate job
N times, 2 s apart (a client's think time) and, with spares, also back to back (the next job
may arrive before the replacement spare is ready), and reports end-to-end latencies.

    python bench/job_overhead.py [--jobs 10] [--out bench/results/job_overhead.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import start_server  # noqa: E402

JOB = {
    "kernel": {
        "source_code": "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n",
        "kernel_type": "torch",
        "io": {"args": [{"name": "x", "type": "tensor", "tensor_spec": {"shape": [1024]}, "role": "input"}]},
    },
    "num_trials": 1,
}


def measure(spares: bool, jobs: int, gap_s: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp), {"SPARE_WORKERS": str(spares).lower(), "MAX_WORKERS": "1"})
        try:
            with httpx.Client(base_url=server.url, timeout=300) as client:
                client.post("/evaluate", json=JOB).raise_for_status()  # first job: warm caches
                latencies = []
                for _ in range(jobs):
                    time.sleep(gap_s)  # a client's think time between jobs
                    t0 = time.perf_counter()
                    r = client.post("/evaluate", json=JOB)
                    latencies.append((time.perf_counter() - t0) * 1e3)
                    assert r.json()["kernel_exec_result"]["compiled"], r.text
        finally:
            server.stop()
    return {"median_ms": statistics.median(latencies), "min_ms": min(latencies),
            "max_ms": max(latencies), "jobs": jobs}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench/results/job_overhead.json"))
    args = parser.parse_args()
    results = {
        "spares, 2 s apart": measure(True, args.jobs, 2.0),
        "spares, back2back": measure(True, args.jobs, 0.0),
        "cold, 2 s apart": measure(False, args.jobs, 2.0),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"{'mode':<20}{'median ms':>12}{'min ms':>10}{'max ms':>10}")
    for mode, r in results.items():
        print(f"{mode:<20}{r['median_ms']:>12.1f}{r['min_ms']:>10.1f}{r['max_ms']:>10.1f}")


if __name__ == "__main__":
    main()
