"""Per-job overhead: sequential trivial /evaluate calls, with the worker pool and without.

    python bench/job_overhead.py [--jobs 50] [--out bench/results/job_overhead.json]

Overhead is a job's wall time at the client minus its warm-up and timing stages (what the
server spends around the kernel: HTTP, queueing, waiting for a worker, compiling, inputs, the
correctness run, handing the result back). Three ways, in one run:

- ``pool (N spares)``: the server with N ready workers per GPU forked from the zygote ahead of
  demand (``--spares``, default: `auto` (the server's default, sized by GPU memory) and 6),
  started and ready before the jobs begin, and how long a worker took to get ready;
- ``no spares``: SPARES_PER_GPU=0, so each job waits for a worker forked on demand;
- ``cold``: the path without any pool (a fresh interpreter per job that imports torch and
  creates its CUDA context, then runs the same kernel once), timed directly.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.conftest import start_server

SOURCE = "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
JOB = {
    "kernel": {"source_code": SOURCE, "kernel_type": "torch",
               "io": {"args": [{"name": "x", "type": "tensor", "role": "input",
                                "tensor_spec": {"shape": [1024], "dtype": "float32",
                                                "init": {"kind": "randn"}}}]}},
    "num_trials": 1,
}
COLD = """
import time, torch
t0 = time.perf_counter()
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.empty(1, device=device)
x = torch.randn(1024, device=device)
(x * 2).sum().item()
print((time.perf_counter() - t0) * 1e3)
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(values), 2), "p95": round(percentile(values, 95), 2),
            "p99": round(percentile(values, 99), 2),
            "min": round(min(values), 2), "max": round(max(values), 2),
            "over_1s": sum(1 for v in values if v > 1000.0)}


def measure(env: dict[str, str], jobs: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp), {"MAX_WORKERS": "1", **env})
        try:
            with httpx.Client(base_url=server.url, timeout=300) as client:
                client.post("/evaluate", json=JOB).raise_for_status()  # warm the path once
                if env.get("SPARES_PER_GPU") != "0":
                    print(f"  {server.wait_for_spares()} ready workers before the jobs", flush=True)
                walls, overheads, stages = [], [], []
                spent: list[dict[str, float]] = []
                for _ in range(jobs):
                    t0 = time.perf_counter()
                    r = client.post("/evaluate", json=JOB)
                    wall = (time.perf_counter() - t0) * 1e3
                    body = r.json()
                    assert body["kernel_exec_result"]["outcome"] == "success", r.text
                    st = body["stage_timings"]
                    walls.append(wall)
                    overheads.append(wall - st.get("warmup", 0.0) - st.get("timing", 0.0))
                    stages.append(st)
                    meta = body["kernel_exec_result"].get("metadata") or {}
                    parts_of_job = {f"timing.{k}": float(v) for k, v in
                                    ((meta.get("timing_figures") or {}).get("spent_ms")
                                     or {}).items()}
                    parts_of_job.update({k: float(v["ms"]) for k, v in
                                         (meta.get("worker_calls") or {}).items()})
                    # launch provenance: the wall time of tracing one more call
                    parts_of_job["provenance"] = float(
                        (meta.get("provenance") or {}).get("cost_ms") or 0.0)
                    spent.append(parts_of_job)
            log = server.log()
        finally:
            server.stop()
    stage_keys = sorted({k for st in stages for k in st})
    spent_keys = sorted({k for sp in spent for k in sp})
    p95 = percentile(walls, 95)
    slow = [i for i, w in enumerate(walls) if w >= p95]
    ready = [float(m) for m in re.findall(r"worker ready in (\d+) ms", log)]
    parts: dict[str, list[float]] = {}
    for name, value in re.findall(r"(\w+)_ms (\d+(?:\.\d+)?)", log):
        parts.setdefault(name, []).append(float(value))
    return {"wall_ms": summary(walls), "overhead_ms": summary(overheads), "jobs": jobs,
            **worker_exits(log),
            "worker_ready_ms": summary(ready) if ready else None,
            "worker_ready_parts_p50_ms": {k: round(statistics.median(v), 1) for k, v in parts.items()},
            "stage_p50_ms": _p50_by_key(stages, stage_keys),
            # the timing run by part (timing_figures.spent_ms) and the server's requests
            # (worker_calls), p50 per job
            "spent_p50_ms": _p50_by_key(spent, spent_keys),
            # where the slowest twentieth of the jobs (wall >= p95) spent their time, p50
            "tail_stage_p50_ms": _p50_by_key([stages[i] for i in slow], stage_keys),
            "tail_spent_p50_ms": _p50_by_key([spent[i] for i in slow], spent_keys),
            # launch provenance's wall time over the job's, p50 over the jobs
            "provenance_share_p50": round(statistics.median(
                sp.get("provenance", 0.0) / w for sp, w in zip(spent, walls)), 4)}


def worker_exits(log: str) -> dict[str, dict[str, float] | None]:
    """A job process's exit, SIGKILL until gone, as the pool logged it (what the next timing
    waits for): all, and by whether workers were starting on the device as it went."""
    exits = [(float(ms), int(n)) for ms, n in
             re.findall(r"worker gone (\d+(?:\.\d+)?) ms after its kill \((\d+) starting", log)]
    quiet = [ms for ms, n in exits if n == 0]
    busy = [ms for ms, n in exits if n > 0]
    return {"worker_exit_ms": summary([ms for ms, _ in exits]) if exits else None,
            "worker_exit_ms_none_starting": summary(quiet) if quiet else None,
            "worker_exit_ms_some_starting": summary(busy) if busy else None}


def _p50_by_key(rows: list[dict[str, float]], keys: list[str]) -> dict[str, float]:
    """Per key, the median over ``rows`` (a row without the key counts 0), to 0.01 ms."""
    return {k: round(statistics.median(row.get(k, 0.0) for row in rows), 2) for k in keys}


def cold(runs: int) -> dict[str, object]:
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", COLD], check=True, capture_output=True)
        walls.append((time.perf_counter() - t0) * 1e3)
    return {"wall_ms": summary(walls), "overhead_ms": summary(walls), "jobs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--cold-runs", type=int, default=5)
    parser.add_argument("--spares", type=lambda v: v.split(","), default=["auto", "6"],
                        help="ready workers per GPU to measure, comma-separated numbers or 'auto' "
                             "(the server's default); the first is the ratio's")
    parser.add_argument("--pool-only", action="store_true",
                        help="only the pool's rows (no 'no spares', no 'cold')")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/job_overhead.json")
    args = parser.parse_args()
    results: dict[str, dict[str, object]] = {}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for n in args.spares:
        print(f"pool, SPARES_PER_GPU={n}", flush=True)
        name = f"pool ({n} spares)"
        results[name] = measure({"SPARES_PER_GPU": n, "LOG_LEVEL": "debug"}, args.jobs)
        # written after each configuration: a run cut short by its time limit keeps them
        args.out.write_text(json.dumps(results, indent=2))
        print(f"  wall ms {json.dumps(results[name]['wall_ms'])}", flush=True)
        for exits in ("worker_exit_ms", "worker_exit_ms_none_starting",
                      "worker_exit_ms_some_starting"):
            print(f"  {exits} {json.dumps(results[name].get(exits))}", flush=True)
    if not args.pool_only:
        results["no spares"] = measure({"SPARES_PER_GPU": "0", "LOG_LEVEL": "debug"},
                                       max(10, args.jobs // 5))
        results["cold"] = cold(args.cold_runs)
        pool = next(iter(results))  # the first spare count
        pool_p50 = results[pool]["overhead_ms"]["p50"]  # type: ignore[index]
        cold_p50 = results["cold"]["overhead_ms"]["p50"]  # type: ignore[index]
        results["cold / pool overhead p50"] = {
            "ratio": round(cold_p50 / pool_p50, 1) if pool_p50 else None}
    args.out.write_text(json.dumps(results, indent=2))
    print(f"{'mode':<18}{'jobs':>6}{'wall p50':>10}{'wall p95':>10}{'ovh p50':>10}{'ovh p95':>10}"
          f"{'ready p50':>10}")
    for mode, r in results.items():
        if mode.startswith("cold /"):
            continue
        ready = r.get("worker_ready_ms")
        print(f"{mode:<18}{r['jobs']:>6}{r['wall_ms']['p50']:>10.1f}{r['wall_ms']['p95']:>10.1f}"  # type: ignore[index]
              f"{r['overhead_ms']['p50']:>10.1f}{r['overhead_ms']['p95']:>10.1f}"  # type: ignore[index]
              f"{ready['p50'] if ready else '-':>10}")  # type: ignore[index]
    for mode, r in results.items():
        if "stage_p50_ms" not in r:
            continue
        print(f"{mode} stage p50 (ms):", r["stage_p50_ms"])
        print(f"{mode} wall p99 {r['wall_ms']['p99']:.1f} ms, max {r['wall_ms']['max']:.1f} ms, "  # type: ignore[index]
              f"over 1 s: {r['wall_ms']['over_1s']}")  # type: ignore[index]
    if "cold / pool overhead p50" in results:
        print("cold / pool overhead p50:", results["cold / pool overhead p50"])


if __name__ == "__main__":
    main()
