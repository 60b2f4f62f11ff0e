"""How many GPU worker start-ups a GPU sustains, and which step the driver serialises.

Starts N processes at once (N = 1, 3, 6 by default), each doing the steps of a worker's
start one after another, and prints each step's median time per N, the total rate, and the
GPU memory one started process holds. Run on the GPU host:

    python3 bench/context_rate.py [--counts 1,3,6] [--skip-cublas both|no|yes]
        [--env 'CUDA_DEVICE_MAX_CONNECTIONS=1' ...] [--out FILE]

Each ``--env`` adds a variant: the same counts again with those variables set in the
processes before CUDA is initialised (``;`` separates several in one variant).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import time
from typing import Any


def _steps(barrier: Any, queue: Any, skip_blas: bool, env: dict[str, str]) -> None:
    import os

    os.environ.update(env)
    import torch

    barrier.wait()
    times: dict[str, float] = {}
    t = time.perf_counter()
    began = t

    def lap(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        times[name] = (now - t) * 1e3
        t = now

    torch.cuda.init()
    torch.empty(1, device="cuda")
    lap("context")
    torch.manual_seed(0)
    warm = torch.randn(64, 64, device="cuda")
    warm.sum().item()
    lap("rng_and_first_kernels")
    if not skip_blas:
        (warm @ warm).sum().item()
        lap("cublas")
    from harness import timer

    timer.bind("cuda")
    lap("cupti_timer")
    from harness import device_memory

    region = device_memory.Region.create(warm.numel() * 4, warm.device)
    region.bytes()[: warm.numel() * 4].copy_(warm.reshape(-1).view(torch.uint8))
    os.close(region.fd)
    region.close()
    lap("gpu_export")
    times["total"] = (time.perf_counter() - began) * 1e3
    free, total = torch.cuda.mem_get_info()
    times["used_after_gb"] = (total - free) / 2**30
    queue.put(times)
    barrier.wait()  # hold the context until every process has measured


def run(count: int, skip_blas: bool, env: dict[str, str]) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    barrier, queue = ctx.Barrier(count + 1), ctx.Queue()
    procs = [ctx.Process(target=_steps, args=(barrier, queue, skip_blas, env)) for _ in range(count)]
    for p in procs:
        p.start()
    time.sleep(2.0 + 0.25 * count)  # let every process import torch first
    began = time.perf_counter()
    barrier.wait()
    results = [queue.get(timeout=120) for _ in procs]
    wall = time.perf_counter() - began
    import subprocess

    used = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                          check=False, capture_output=True, text=True).stdout.strip()
    barrier.wait()
    for p in procs:
        p.join(30)
    keys = [k for k in results[0] if k != "used_after_gb"]
    return {
        "processes": count, "skip_cublas": skip_blas, "env": env,
        "median_ms": {k: round(statistics.median(r[k] for r in results), 1) for k in keys},
        "max_ms": {k: round(max(r[k] for r in results), 1) for k in keys},
        # every process's total is measured from the barrier; the slowest one ends the round
        "starts_per_s": round(count / (max(r["total"] for r in results) / 1e3), 2),
        "wall_s": round(wall, 2),
        "gpu_memory_used_mib_all": used,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--counts", default="1,3,6")
    parser.add_argument("--skip-cublas", choices=("both", "no", "yes"), default="both")
    parser.add_argument("--env", action="append", default=[],
                        help="a variant: KEY=VALUE[;KEY=VALUE...] set before CUDA starts")
    parser.add_argument("--out")
    args = parser.parse_args()
    variants: list[dict[str, str]] = [{}]
    for variant in args.env:
        variants.append(dict(kv.split("=", 1) for kv in variant.split(";") if kv))
    skips = {"both": (False, True), "no": (False,), "yes": (True,)}[args.skip_cublas]
    rows = []
    for env in variants:
        for skip in skips:
            for n in [int(c) for c in args.counts.split(",")]:
                row = run(n, skip, env)
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
