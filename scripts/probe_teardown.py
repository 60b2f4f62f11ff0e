"""How long a job process takes to be gone once it is done with, by what it holds and how it
ends: SIGKILL (what the server does) against leaving on its own, beside idle contexts as a
server's spares are, every process with one hardware queue as a server's workers have.

    python scripts/probe_teardown.py [--reps 8] [--idle 6] [--only NAME] [--kill-only]
                                     [--out FILE]

Diagnostics for issue 26 (what bounds back-to-back jobs: the next timing waits for the last
job's process to be gone); prints one JSON document, per variant the milliseconds from the
kill (or the request to leave) until the process was reaped.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from probe_common import emit, idle_contexts

SETUP = {
    "context": "torch.zeros(1, device='cuda')",
    "context + CUPTI": ("from harness.device_checks import ActivityTracer\n"
                        "torch.zeros(1, device='cuda'); ActivityTracer.start()"),
    "timer": "from harness.timer import bind\ntimer = bind('cuda')",
    "timer, used": ("from harness.timer import bind\ntimer = bind('cuda')\n"
                    "x = torch.randn(1 << 16, device='cuda')\n"
                    "timer.extras(lambda: x * 2, 0.01, 20, None)"),
    "timer, used, CUPTI finalized": ("from harness.timer import bind\ntimer = bind('cuda')\n"
                                     "x = torch.randn(1 << 16, device='cuda')\n"
                                     "timer.extras(lambda: x * 2, 0.01, 20, None)\n"
                                     "torch.cuda.synchronize()\n"
                                     "from cupti import cupti\n"
                                     "cupti.activity_flush_all(1); cupti.finalize()"),
    "timer, used, cache emptied": ("from harness.timer import bind\ntimer = bind('cuda')\n"
                                   "x = torch.randn(1 << 16, device='cuda')\n"
                                   "timer.extras(lambda: x * 2, 0.01, 20, None)\n"
                                   "del x; torch.cuda.synchronize(); torch.cuda.empty_cache()"),
}
CHILD = ("import os, sys, time, torch\n{setup}\ntorch.cuda.synchronize()\n"
         "sys.stdout.write('ready\\n'); sys.stdout.flush()\n"
         "sys.stdin.read(1)\nos._exit(0)\n")


ENV = {**os.environ, "CUDA_DEVICE_MAX_CONNECTIONS": "1"}


def start(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=ENV)


def ready(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"a child did not start (said {line!r})")


def gone_ms(p: subprocess.Popen[str], polite: bool) -> float:
    t0 = time.perf_counter()
    if polite:
        assert p.stdin is not None
        p.stdin.write("x")
        p.stdin.flush()
    else:
        os.kill(p.pid, signal.SIGKILL)
    p.wait()
    return (time.perf_counter() - t0) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=8)
    parser.add_argument("--idle", type=int, default=6)
    parser.add_argument("--only", help="the variants whose name contains this")
    parser.add_argument("--kill-only", action="store_true", help="SIGKILL alone")
    parser.add_argument("--out")
    args = parser.parse_args()
    out: dict[str, object] = {"idle_contexts": args.idle, "reps": args.reps,
                              "queues": 1, "variants": {}}
    with idle_contexts(args.idle, ENV):
        for name, setup in SETUP.items():
            if args.only and args.only not in name:
                continue
            for polite in (False,) if args.kill_only else (False, True):
                procs = [start(CHILD.format(setup=setup)) for _ in range(args.reps)]
                ready(procs)
                times = []
                for p in procs:
                    time.sleep(0.3)
                    times.append(gone_ms(p, polite))
                label = f"{name} / {'leaves itself' if polite else 'SIGKILL'}"
                out["variants"][label] = {  # type: ignore[index]
                    "p50_ms": round(statistics.median(times), 1),
                    "min_ms": round(min(times), 1), "max_ms": round(max(times), 1),
                    "ms": [round(t, 1) for t in times]}
                print(f"{label:55s} p50 {statistics.median(times):7.1f}  min {min(times):7.1f}"
                      f"  max {max(times):7.1f}", flush=True)
    emit(out, Path(args.out) if args.out else None)

if __name__ == "__main__":
    main()
