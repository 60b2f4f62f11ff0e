"""Host-bound calls: two readings of identical code, one after the other and in turn.

    python bench/host_bound_drift.py MODEL.py [MODEL.py ...] [--repeats 2] [--out drift.json]

Each MODEL.py is a KernelBench problem (``Model``, ``get_inputs``, ``get_init_inputs``). Per
problem and repeat, two fresh processes load it, both held to one core (``taskset -c 3``, as
the server holds a timed process to its GPU's timing core); the driver asks each for one
event-timed, device-synchronised call at a time, and reports the ratio of the two processes'
medians taken

- ``blocks``: 20 calls of A, then 20 of B (how two readings taken one after the other meet
  the host: the server's sequential reference and candidate readings);
- ``interleaved``: A, B, A, B ... 20 each (how :mod:`judge.beside` takes them).

A call that waits for the device from inside, or launches more kernels than the driver
queues (cuDNN's RNNs, SwinTransformerV2), runs at its host thread's pace, and the host's speed
moves from one second to the next: the ``blocks`` ratio strays from 1.00 where the
``interleaved`` one does not. Needs a GPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

CALLS = 20
CORE = "3"


def child(path: str) -> None:
    """Load the model, then answer each line on stdin with one timed call's ms."""
    import torch

    spec = importlib.util.spec_from_file_location("problem", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).cuda().eval()
    inputs = [t.cuda() if isinstance(t, torch.Tensor) else t for t in module.get_inputs()]
    with torch.no_grad():
        for _ in range(3):
            model(*inputs)
        torch.cuda.synchronize()
        print("ready", flush=True)
        for _ in sys.stdin:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            model(*inputs)
            end.record()
            torch.cuda.synchronize()
            print(start.elapsed_time(end), flush=True)


def ask(process: subprocess.Popen[str]) -> float:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("go\n")
    process.stdin.flush()
    return float(process.stdout.readline())


def pair_of_readings(path: Path) -> dict[str, Any]:
    procs = [subprocess.Popen(["taskset", "-c", CORE, sys.executable, __file__, "--child",
                               str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True) for _ in range(2)]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        a = [ask(procs[0]) for _ in range(CALLS)]
        b = [ask(procs[1]) for _ in range(CALLS)]
        ai: list[float] = []
        bi: list[float] = []
        for _ in range(CALLS):
            ai.append(ask(procs[0]))
            bi.append(ask(procs[1]))
    finally:
        for p in procs:
            if p.stdin is not None:
                p.stdin.close()
            p.wait(30)
    med = statistics.median
    return {"blocks": round(med(a) / med(b), 3), "interleaved": round(med(ai) / med(bi), 3),
            "A_ms": round(med(a), 2), "B_ms": round(med(b), 2),
            "Ai_ms": round(med(ai), 2), "Bi_ms": round(med(bi), 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("host_bound_drift.json"))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child)
        return 0
    rows = []
    for path in args.models:
        for repeat in range(args.repeats):
            row = {"problem": path.stem, "repeat": repeat, **pair_of_readings(path)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    args.out.write_text(json.dumps({"calls_per_reading": CALLS, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
