"""Where does a short kernel's spread between processes come from? (GPU host probe)

    python scripts/probe_process_spread.py [--processes 6] [--allocations 4] [--out FILE]

The server's timings of a ~27 us fp16 2048x2048 matmul agree within 0.1% inside one
evaluation, yet their medians over ten evaluations (ten worker processes) spread by 1.7%
(bench/results/timing_rigour.json). Each process here times the same matmul the timer's way
(read flush over twice the L2, GPU sleep lead, two events, median of 40 samples) on
``--allocations`` fresh pairs of input tensors, each at its own addresses, and names the
kernel cuBLAS ran. If the medians of one process's allocations spread as widely as those of
different processes, the spread follows where the tensors landed in memory, not the process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

CHILD = r'''
import json, statistics, sys, torch
n, allocations, samples = 2048, int(sys.argv[1]), 40
props = torch.cuda.get_device_properties(0)
flush = torch.zeros(2 * props.L2_cache_size // 4, dtype=torch.int32, device="cuda")
lead = int(500e-6 * props.clock_rate * 1e3)
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
kept, medians, addresses = [], [], []
for _ in range(allocations):
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    kept += [a, b]
    for _ in range(10):
        a @ b
    out = []
    for _ in range(samples):
        flush.sum()
        torch.cuda.synchronize()
        torch._C._cuda_sleep(lead)
        start.record()
        a @ b
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end))
    medians.append(statistics.median(out))
    addresses.append([hex(a.data_ptr()), hex(b.data_ptr())])
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
    kept[0] @ kept[1]
    torch.cuda.synchronize()
names = sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
print(json.dumps({"medians_ms": medians, "addresses": addresses, "kernels": names}))
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--allocations", type=int, default=4)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []
    for _ in range(args.processes):
        done = subprocess.run([sys.executable, "-c", CHILD, str(args.allocations)],
                              check=False, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            runs.append({"error": done.stderr[-500:]})
            continue
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    ok = [r for r in runs if "medians_ms" in r]

    def cv(values: list[float]) -> float:
        return statistics.stdev(values) / statistics.mean(values) if len(values) > 1 else 0.0

    report = {
        "runs": runs,
        "cv_within_process_mean": statistics.mean(cv(r["medians_ms"]) for r in ok) if ok else None,
        "cv_of_first_allocations": cv([r["medians_ms"][0] for r in ok]) if ok else None,
        "cv_all": cv([m for r in ok for m in r["medians_ms"]]) if ok else None,
        "kernel_sets": sorted({" | ".join(r["kernels"]) for r in ok}),
    }
    for r in ok:
        print(" ".join(f"{m * 1e3:.2f}" for m in r["medians_ms"]), "us |", ", ".join(r["kernels"])[:160])
    print({k: v for k, v in report.items() if k != "runs"})
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
