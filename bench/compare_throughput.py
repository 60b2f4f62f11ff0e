"""Throughput: 100 /compare jobs of 20 distinct KernelBench-style problems, submitted at once.

    python bench/compare_throughput.py [--jobs 100] [--gpus 0] [--jobs-per-gpu 1,4] [--out FILE]
    python bench/compare_throughput.py --mode batch     # one /compare/batch per problem
    python bench/compare_throughput.py --mode batch50   # one batch of 50 against one reference
    python bench/compare_throughput.py --small          # the same problems at 256x256 and the like

``--mode batch``: the same jobs as 20 /compare/batch requests (one per problem, its
candidates together), all sent at once. ``--mode batch50``: one batch of 50 candidates against
one reference: how many distinct reference figures the answers carry (one, by design), and the
wall time per candidate. ``KES_SERVER_ROOT`` runs another checkout's server (a baseline).
``--small``: every problem shrunk (8192 -> 256, 4096 and 2048 -> 128: kernels of microseconds,
a 256x256 matmul among them), so the figure is the server's cost per job rather than the
kernels' and the tensors'; the CPU always uses these sizes.

Reports jobs per minute and the share of the wall time the GPU(s) were busy, sampled by
``nvidia-smi`` every 100 ms (utilization.gpu: the share of time a kernel was running). Each
problem is compared with a correct ModelNew of its own, five times over (so reference reuse
applies after the first). With ``--gpus 0,1`` the server gets both GPUs (GPU_DEVICE). With
``--jobs-per-gpu 1,4`` the same jobs run once per JOBS_PER_GPU value, one server each, in
this one call (side by side); the output is then a list.

Each custom kernel is its reference's own code, so every speedup should be ~1.0: their spread
(``speedup``) shows whether jobs sharing a GPU disturbed each other's timings.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.conftest import cuda_available, start_server

# (forward body, get_inputs body) at sizes whose kernels take 0.1-2 ms on an H100.
OPS = [
    ("return torch.relu(x)", "[torch.randn(8192, 8192)]"),
    ("return torch.sigmoid(x) * x", "[torch.randn(8192, 8192)]"),
    ("return torch.softmax(x, dim=-1)", "[torch.randn(4096, 8192)]"),
    ("return torch.nn.functional.gelu(x)", "[torch.randn(8192, 8192)]"),
    ("return x @ x", "[torch.randn(2048, 2048)]"),
    ("return x @ x.t()", "[torch.randn(4096, 1024)]"),
    ("return torch.layer_norm(x, x.shape[-1:])", "[torch.randn(8192, 4096)]"),
    ("return x.sum(dim=0)", "[torch.randn(8192, 8192)]"),
    ("return x.cumsum(dim=1)", "[torch.randn(4096, 4096)]"),
    ("return torch.tanh(x) + 1", "[torch.randn(8192, 8192)]"),
    ("return (x * x).mean(dim=-1)", "[torch.randn(8192, 8192)]"),
    ("return torch.clamp(x, -0.5, 0.5)", "[torch.randn(8192, 8192)]"),
    ("return x.transpose(0, 1).contiguous()", "[torch.randn(8192, 8192)]"),
    ("return torch.bmm(x, x)", "[torch.randn(64, 256, 256)]"),
    ("return torch.exp(x).sum(dim=1)", "[torch.randn(8192, 4096)]"),
    ("return torch.nn.functional.silu(x)", "[torch.randn(8192, 8192)]"),
    ("return torch.abs(x).max(dim=1).values", "[torch.randn(8192, 8192)]"),
    ("return x.half() @ x.half()", "[torch.randn(4096, 4096)]"),
    ("return torch.nn.functional.avg_pool2d(x, 2)", "[torch.randn(32, 64, 256, 256)]"),
    ("return torch.log1p(torch.abs(x))", "[torch.randn(8192, 8192)]"),
]


def problem(i: int, new: bool) -> str:
    body, inputs = OPS[i % len(OPS)]
    name = "ModelNew" if new else "Model"
    return (f"class {name}(torch.nn.Module):\n    def forward(self, x):\n        {body}\n\n"
            f"def get_inputs():\n    return {inputs}\n\ndef get_init_inputs():\n    return []\n")


class GpuSampler:
    """utilization.gpu of the given GPUs every 100 ms, through nvidia-smi."""

    def __init__(self, gpus: str) -> None:
        self.proc = None
        if shutil.which("nvidia-smi"):
            self.proc = subprocess.Popen(
                ["nvidia-smi", f"--id={gpus}", "--query-gpu=index,utilization.gpu",
                 "--format=csv,noheader,nounits", "-lms", "100"],
                stdout=subprocess.PIPE, text=True)

    def stop(self) -> dict[str, float]:
        if self.proc is None:
            return {}
        self.proc.terminate()
        out, _ = self.proc.communicate()
        per: dict[str, list[float]] = {}
        for line in out.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 2 and parts[1].replace(".", "").isdigit():
                per.setdefault(parts[0], []).append(float(parts[1]))
        return {gpu: round(sum(v) / len(v), 1) for gpu, v in per.items() if v}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process so far (0 where /proc has none)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def post_batches(client: httpx.Client, bodies: list[dict], per_batch: dict[int, list[int]],
                 pool: ThreadPoolExecutor) -> list[tuple[int, dict]]:
    """Send one /compare/batch per group of ``bodies`` (their indices), all at once; each
    candidate's (HTTP status /compare would have given, its answer)."""
    def one(indices: list[int]) -> list[tuple[int, dict]]:
        first = bodies[indices[0]]
        request = {"ref_kernel": first["ref_kernel"], "num_trials": first["num_trials"],
                   "num_correct_trials": first["num_correct_trials"],
                   "custom_kernels": [bodies[i]["custom_kernel"] for i in indices]}
        out = []
        with client.stream("POST", "/compare/batch", json=request) as r:
            for line in r.iter_lines():
                item = json.loads(line)
                if "index" in item:
                    out.append((item["status_code"], item["response"]))
        return out
    answers: list[tuple[int, dict]] = []
    for future in as_completed([pool.submit(one, idx) for idx in per_batch.values()]):
        answers.extend(future.result())
    return answers


def percentile(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1) if ordered else None


def run(jobs: int, gpus: str, num_trials: int, log_to: Path | None = None,
        jobs_per_gpu: int = 1, mode: str = "compare") -> dict[str, object]:
    env = {"MAX_WORKERS": "8", "JOBS_PER_GPU": str(jobs_per_gpu)}
    if gpus:
        env["GPU_DEVICE"] = gpus
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp), env)
        pool: ThreadPoolExecutor | None = None
        try:
            client = httpx.Client(base_url=server.url, timeout=900)
            problems = 1 if mode == "batch50" else len(OPS)
            bodies = [{"ref_kernel": {"source_code": problem(i % problems, False),
                                      "kernel_type": "torch"},
                       "custom_kernel": {"source_code": problem(i % problems, True),
                                         "kernel_type": "torch"},
                       "num_trials": num_trials or None, "num_correct_trials": 2}
                      for i in range(jobs)]
            print(f"{server.wait_for_spares()} ready workers; {jobs} jobs", flush=True)
            sampler = GpuSampler(gpus or "0")
            cpu0 = cpu_seconds(server.proc.pid)
            t0 = time.perf_counter()
            pool = ThreadPoolExecutor(max_workers=jobs)
            if mode == "compare":
                futures = [pool.submit(client.post, "/compare", json=b) for b in bodies]
                for done, _ in enumerate(as_completed(futures), 1):
                    if done % 10 == 0:
                        print(f"  {done}/{jobs} done, {time.perf_counter() - t0:.0f} s",
                              flush=True)
                answers = [(f.result().status_code, f.result().json()) for f in futures]
            else:
                groups: dict[int, list[int]] = {}
                for i in range(jobs):
                    groups.setdefault(i % problems, []).append(i)
                answers = post_batches(client, bodies, groups, pool)
            wall = time.perf_counter() - t0
            server_cpu = cpu_seconds(server.proc.pid) - cpu0
            busy = sampler.stop()
            stats = client.get("/stats").json()
        finally:
            def keep_log() -> None:  # what the server said, for a run that went wrong
                if log_to is not None:
                    log_to.write_text("\n".join(server.log().splitlines()[-400:]) + "\n")

            keep_log()  # first: a graceful stop with jobs running can outlast `timeout -k`
            # cut short (SIGTERM): requests still out fail once the server is gone
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
            server.stop()
            keep_log()
    outcomes: dict[str, int] = {}
    calls, timing_parts = parts_per_job(answers)
    speedups: list[float] = []
    stages: dict[str, list[float]] = {}
    ref_medians: set[float] = set()
    for code, body in answers:
        kernel = body.get("kernel_exec_result") or {}
        if isinstance((kernel.get("metadata") or {}).get("speedup"), (int, float)):
            speedups.append(float(kernel["metadata"]["speedup"]))
        key = f"{code} {kernel.get('outcome')}"
        outcomes[key] = outcomes.get(key, 0) + 1
        for stage, ms in (body.get("stage_timings") or {}).items():
            stages.setdefault(stage, []).append(float(ms))
        ref = (body.get("ref_runtime") or {}).get("median")
        if isinstance(ref, (int, float)):
            ref_medians.add(float(ref))
    speedups.sort()

    def pick(q: float) -> float | None:
        return round(speedups[min(len(speedups) - 1, int(q * len(speedups)))], 3) if speedups else None
    return {"mode": mode, "server_root": os.environ.get("KES_SERVER_ROOT") or str(ROOT),
            "jobs": jobs, "gpus": gpus or "0", "jobs_per_gpu": jobs_per_gpu,
            "wall_s": round(wall, 2), "wall_per_job_s": round(wall / jobs, 3),
            "stage_p50_ms": {k: percentile(v, 0.5) for k, v in sorted(stages.items())},
            "reference_figures": len(ref_medians) if mode == "batch50" else None,
            # the server process's own CPU time over the run (one event loop: past ~0.8 of
            # the wall, it is what limits the jobs)
            "server_cpu_s": round(server_cpu, 1),
            "jobs_per_min": round(jobs / wall * 60, 1), "gpu_busy_pct": busy,
            "outcomes": outcomes, "reference_cache": stats.get("cache", {}).get("reference"),
            "stage_means_ms": stats.get("stage_means_ms"),
            # same code on both sides: ~1.0 unless timings disturbed each other
            "speedup": {"p5": pick(0.05), "median": pick(0.5), "p95": pick(0.95),
                        "min": speedups[0] if speedups else None,
                        "max": speedups[-1] if speedups else None},
            "suspicious": sum(1 for _, body in answers if ((body.get("kernel_exec_result") or {})
                                                            .get("integrity") or {}).get("suspicious")),
            # what each flagged (or far from 1.0) answer said: same code on both sides
            "outliers": outliers(answers),
            # every answer that is not a success (each candidate is its reference's twin):
            # what it said and where, its calibration kept or not
            "not_success": not_success(answers),
            # server wall of each worker request (role.op), per job: where the stages go
            "worker_calls_mean_ms": {k: round(v, 1) for k, v in
                                     sorted(calls.items(), key=lambda kv: -kv[1])},
            # the candidate's timing run by part (timing_figures.spent_ms) and the judge's
            # trials and audit by step (judge_spent_ms), per job
            "timing_spent_mean_ms": {k: round(v, 1) for k, v in
                                     sorted(timing_parts.items(), key=lambda kv: -kv[1])},
            # what launch provenance and the speed-of-light count cost the jobs
            "insight_cost": insight_cost(answers, wall / jobs * 1e3),
            # each job's worker requests and whether its judge's calibration was kept (the
            # first candidate of a reference pays what the later ones skip)
            "per_job_calls": per_job_calls(answers)}


def insight_cost(answers: list[tuple[int, dict]], wall_per_job_ms: float) -> dict:
    """The wall time each job spent tracing one call of its candidate (``provenance.cost_ms``)
    and, where the job timed its reference, that side's trace and the count of the reference's
    work (``speed_of_light.count_ms``): ms per job, and their mean over the run's wall time per
    job (a share of what a job costs the GPU it holds)."""
    per_job: list[float] = []
    for _, body in answers:
        meta = (body.get("kernel_exec_result") or {}).get("metadata") or {}
        if not meta.get("provenance"):
            continue
        ms = float(meta["provenance"].get("cost_ms") or 0.0)
        ref_meta = (body.get("ref_exec_result") or {}).get("metadata") or {}
        if not (meta.get("reference") or {}).get("reused"):
            ms += float((ref_meta.get("provenance") or {}).get("cost_ms") or 0.0)
            ms += float((meta.get("speed_of_light") or {}).get("count_ms") or 0.0)
        per_job.append(ms)
    if not per_job:
        return {"jobs": 0}
    mean = sum(per_job) / len(per_job)
    return {"jobs": len(per_job), "mean_ms": round(mean, 2), "p50_ms": percentile(per_job, 0.5),
            "max_ms": round(max(per_job), 2),
            "share_of_wall_per_job": round(mean / wall_per_job_ms, 4) if wall_per_job_ms else None}


def per_job_calls(answers: list[tuple[int, dict]]) -> list[dict]:
    """Per answer, in submission order: its worker requests' server wall (ms) and whether its
    judge's calibration was kept."""
    rows = []
    for _, body in answers:
        meta = (body.get("kernel_exec_result") or {}).get("metadata") or {}
        rows.append({"kept": (meta.get("judge_calibration") or {}).get("kept"),
                     "arena_reused": meta.get("arena_reused"),
                     **{name: round(spent["ms"], 1)
                        for name, spent in (meta.get("worker_calls") or {}).items()}})
    return rows


JUDGE_FIGURES = ("judge_ms", "judge_null_call_ms", "judge_null_call_before_ms",
                 "judge_null_call_after_ms", "judge_launch_ms", "judge_slack_ms", "regime",
                 "isolated_median_ms", "samples")


def not_success(answers: list[tuple[int, dict]]) -> list[dict]:
    """Each answer whose candidate's outcome is not "success": its errors and calibration."""
    found = []
    for job, (code, body) in enumerate(answers):
        result = body.get("kernel_exec_result") or {}
        if result.get("outcome") == "success":
            continue
        meta = result.get("metadata") or {}
        found.append({"job": job, "status_code": code, "outcome": result.get("outcome"),
                      "validation_error": (result.get("validation_error") or "")[:400],
                      "runtime_error": (result.get("runtime_error") or "")[:400],
                      "error": (body.get("error") or "")[:400],
                      "judge_calibration": meta.get("judge_calibration")})
    return found


def outliers(answers: list[tuple[int, dict]], far: float = 0.1) -> list[dict]:
    """The answers flagged, or whose speedup is more than ``far`` from 1.0: their integrity
    reasons, tolerance and the judge's figures."""
    found = []
    for job, (_, body) in enumerate(answers):
        result = body.get("kernel_exec_result") or {}
        meta = result.get("metadata") or {}
        integrity = result.get("integrity") or {}
        speedup = meta.get("speedup")
        if not integrity.get("suspicious") and (speedup is None or abs(speedup - 1.0) <= far):
            continue
        figures = meta.get("timing_figures") or {}
        found.append({"job": job, "speedup": speedup, "reasons": integrity.get("reasons"),
                      "tolerance": (integrity.get("timing") or {}).get("tolerance"),
                      "reference_ms": (body.get("ref_exec_result") or {}).get(
                          "runtime_stats", {}).get("median"),
                      **{k: figures.get(k) for k in JUDGE_FIGURES}})
    return found


def parts_per_job(answers: list[tuple[int, dict]]) -> tuple[dict[str, float], dict[str, float]]:
    """Means per job of the server's worker requests (``worker_calls``) and of the timing
    run's and the judge's parts (``timing_figures.spent_ms``, ``judge_spent_ms``), ms."""
    calls: dict[str, float] = {}
    parts: dict[str, float] = {}
    for _, body in answers:
        meta = (body.get("kernel_exec_result") or {}).get("metadata") or {}
        for name, spent in (meta.get("worker_calls") or {}).items():
            calls[name] = calls.get(name, 0.0) + spent["ms"] / len(answers)
        spent_ms = {**((meta.get("timing_figures") or {}).get("spent_ms") or {}),
                    **(meta.get("judge_spent_ms") or {})}
        for part, ms in spent_ms.items():
            parts[part] = parts.get(part, 0.0) + float(ms) / len(answers)
    return calls, parts


def _unwind(*_: object) -> None:
    """`timeout`'s SIGTERM (it comes twice: to the process and to its group): unwind once,
    so the server is stopped and its log kept."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(143)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--gpus", default="")
    parser.add_argument("--num-trials", type=int, default=100, help="per job (KernelBench: 100; 0: none, the server's adaptive rule)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/compare_throughput.json")
    parser.add_argument("--server-log", type=Path, help="write the server log's last 400 lines here")
    parser.add_argument("--mode", choices=["compare", "batch", "batch50"], default="compare")
    parser.add_argument("--small", action="store_true",
                        help="the problems at small sizes (kernels of microseconds)")
    parser.add_argument("--jobs-per-gpu", default="1",
                        help="JOBS_PER_GPU values, comma-separated: one run each, side by side")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _unwind)
    if args.small or not cuda_available():
        OPS[:] = [(b, i.replace("8192", "256").replace("4096", "128").replace("2048", "128"))
                  for b, i in OPS]
    counts = [int(v) for v in args.jobs_per_gpu.split(",") if v.strip()]
    results = []
    for count in counts:
        log_to = (args.server_log.with_name(f"{args.server_log.stem}_j{count}{args.server_log.suffix}")
                  if args.server_log is not None and len(counts) > 1 else args.server_log)
        results.append(run(args.jobs, args.gpus, args.num_trials, log_to, count, args.mode))
        print(json.dumps(results[-1], indent=1), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results[0] if len(results) == 1 else results, indent=2))


if __name__ == "__main__":
    main()
