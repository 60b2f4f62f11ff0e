"""What each part of a spare worker's start costs, and what it adds to the process's exit.

A spare (``subprocess_worker.serve``) makes its CUDA context and warms cuBLAS
(``harness.process.prepare_process``), binds the timer (``harness.timer.bind``: CUPTI's
activity API started, the L2 flush buffer, events) and rehearses a comparison and an
evaluation (``subprocess_worker.rehearse``). Every job process pays one start and one exit,
and the driver serialises much of both across processes, so each part's share of the two is
a part of the floor per job. Each variant below starts in a fresh process, one at a time,
beside 6 idle contexts (a server's spares), with one hardware queue as the pool makes them;
the parent times each part inside the child and then the exit from SIGKILL until reaped.

    python scripts/probe_spare_parts.py [--repeats 4] [--out FILE]

Run on the GPU host (diagnostics for issue 26); prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from probe_common import emit, idle_contexts

ROOT = Path(__file__).resolve().parent.parent
# (what the child does after its context) by variant
VARIANTS = {
    "context only": "context",
    "+ cuBLAS warmed (prepare_process)": "prepare",
    "+ timer bound, CUPTI off": "prepare timer_no_cupti",
    "+ timer bound (CUPTI on)": "prepare timer",
    "+ rehearsal, CUPTI off": "prepare timer_no_cupti rehearse",
    "+ rehearsal (a spare as the pool makes it)": "prepare timer rehearse",
    "+ rehearsal, then torch's cached memory released": "prepare timer rehearse release",
    "SPARE_WARM=none: context, timer, rehearsal": "bare timer rehearse",
    "SPARE_WARM=none, then cached memory released": "bare timer rehearse release",
    "context + 256 MiB held": "context hold",
    "context + 256 MiB allocated and released": "context hold release",
}
CHILD = """
import json, os, sys, time
sys.path.insert(0, {root!r})
steps = os.environ["PROBE_STEPS"].split()
import torch
import harness.device_checks as hd
from harness.process import prepare_process
import subprocess_worker
parts = {{}}
t = time.perf_counter()
def lap(name):
    global t
    torch.cuda.synchronize()
    now = time.perf_counter()
    parts[name] = round((now - t) * 1e3, 1)
    t = now
torch.cuda.init(); torch.zeros(1, device="cuda")
lap("context")
if "prepare" in steps:
    prepare_process("cuda"); lap("cublas")
if "bare" in steps:
    os.environ["KES_SPARE_WARM"] = "none"
    prepare_process("cuda"); lap("cublas")
if "hold" in steps:
    held = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda"); lap("hold")
if "timer_no_cupti" in steps:
    hd.ActivityTracer._start = classmethod(lambda cls: cls())
if "timer" in steps or "timer_no_cupti" in steps:
    worker = subprocess_worker.Worker("cuda"); lap("timer")
if "rehearse" in steps:
    subprocess_worker.rehearse("cuda", worker.timer); lap("rehearsal")
if "release" in steps:
    import gc
    held = None
    gc.collect(); torch.cuda.empty_cache(); lap("release")
parts["reserved_mib"] = round(torch.cuda.memory_reserved() / 2**20)
free, total = torch.cuda.mem_get_info()
parts["gpu_memory_mib"] = round((total - free) / 2**20)
sys.stdout.write(json.dumps(parts) + "\\n"); sys.stdout.flush()
time.sleep(600)
"""


def one(steps: str, env: dict[str, str], cwd: str) -> tuple[dict[str, float], float]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD.format(root=str(ROOT))],
                            stdout=subprocess.PIPE, text=True, cwd=cwd,
                            env={**env, "PROBE_STEPS": steps})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.strip():
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the child of {steps!r} said nothing")
    parts = json.loads(line)
    time.sleep(0.2)
    t = time.perf_counter()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return parts, round((time.perf_counter() - t) * 1e3, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    env = {**os.environ, "CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    result: dict[str, object] = {}
    with idle_contexts(6, env), tempfile.TemporaryDirectory() as cwd:
        for name, steps in VARIANTS.items():
            runs = [one(steps, env, cwd) for _ in range(args.repeats)]
            keys = [k for k in runs[0][0]]
            row = {"parts_median_ms": {k: statistics.median(r[0][k] for r in runs)
                                       for k in keys},
                   "exit_median_ms": statistics.median(r[1] for r in runs),
                   "exit_ms": [r[1] for r in runs]}
            result[name] = row
            print(name, json.dumps(row), flush=True)
    emit(result, args.out)


if __name__ == "__main__":
    main()
