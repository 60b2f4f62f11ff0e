"""What other processes on a GPU do to a kernel's timing: starting, leaving, or idle.

One timing process measures a kernel over and over (CUDA events, 50 samples per round, the
L2 read-flushed before each) while the parent runs phases beside it:

- ``quiet``: nothing else;
- ``idle``: N processes that hold a context and some memory but do nothing;
- ``stopped``: the same N, SIGSTOPped;
- ``start``: N processes creating their contexts (torch, a first kernel, cuBLAS), or with
  ``--start-mode context`` only their contexts (an allocation, no kernel: a worker's
  ungated first start step);
- ``leave``: N processes with a context and 1 GiB each, killed (SIGKILL): their teardown.

Prints, per phase, the rounds' median and worst median against ``quiet``. Run on the GPU host:

    python3 bench/neighbours.py [--count 8] [--kernel-ms 0.2] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import statistics
import time
from typing import Any


def _timer(kernel_ms: float, stop: Any, queue: Any, n: int = 1024) -> None:
    import torch

    a = torch.randn(n, n, device="cuda")
    flush = torch.empty(64 * 2**20, dtype=torch.int32, device="cuda")
    # size the matmul loop to about kernel_ms
    start, end = torch.cuda.Event(True), torch.cuda.Event(True)
    for _ in range(3):
        start.record()
        a @ a
        end.record()
    torch.cuda.synchronize()
    one = start.elapsed_time(end)
    reps = max(1, round(kernel_ms / max(one, 1e-3)))
    events = [(torch.cuda.Event(True), torch.cuda.Event(True)) for _ in range(50)]
    queue.put(("ready", reps))
    while not stop.is_set():
        for s, e in events:
            flush.sum()
            s.record()
            for _ in range(reps):
                a @ a
            e.record()
        torch.cuda.synchronize()
        queue.put(("round", time.monotonic(), statistics.median(s.elapsed_time(e) for s, e in events)))


def _neighbour(mode: str, ready: Any, go: Any) -> None:
    import torch

    if mode in ("start", "context"):
        go.wait()
        torch.cuda.init()
        x = torch.empty(1024, 1024, device="cuda")  # the context, and no kernel
        if mode == "start":
            x.normal_()
            (x @ x).sum().item()
        torch.cuda.synchronize()
        ready.put(os.getpid())
        time.sleep(3600)
    x = torch.empty(2**28, dtype=torch.float32, device="cuda")  # 1 GiB
    x.fill_(1.0)
    torch.cuda.synchronize()
    ready.put(os.getpid())
    time.sleep(3600)


def _collect(rounds: Any) -> list[tuple[float, float]]:
    """The timer's rounds: (when, median ms), until it has sent them all."""
    samples: list[tuple[float, float]] = []
    while True:
        try:
            item = rounds.get(timeout=5)
        except Exception:  # noqa: BLE001 - the timer is done
            return samples
        if item[0] == "round":
            samples.append((item[1], item[2]))


def _report(count: int, samples: list[tuple[float, float]],
            marks: list[tuple[str, float, float]]) -> dict[str, Any]:
    quiet = [m for t, m in samples if any(b <= t <= e for n, b, e in marks if n.startswith("quiet"))]
    base = statistics.median(quiet) if quiet else float("nan")
    report: dict[str, Any] = {"count": count, "quiet_median_ms": round(base, 4), "phases": {}}
    for name, began, ended in marks:
        inside = [m for t, m in samples if began <= t <= ended + 0.5]
        if inside:
            report["phases"][name] = {
                "rounds": len(inside), "median_vs_quiet": round(statistics.median(inside) / base, 4),
                "worst_vs_quiet": round(max(inside) / base, 4)}
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=8)
    parser.add_argument("--kernel-ms", type=float, default=0.2)
    parser.add_argument("--phase-s", type=float, default=3.0)
    parser.add_argument("--size", type=int, default=1024, help="the timed matmul's n (64: µs)")
    parser.add_argument("--start-mode", choices=["start", "context"], default="start")
    parser.add_argument("--out")
    args = parser.parse_args()
    ctx = multiprocessing.get_context("spawn")
    stop, rounds = ctx.Event(), ctx.Queue()
    timer = ctx.Process(target=_timer, args=(args.kernel_ms, stop, rounds, args.size))
    t0 = time.monotonic()
    timer.start()
    assert rounds.get(timeout=120)[0] == "ready"
    print(f"{time.monotonic() - t0:6.1f} s  timer ready", flush=True)
    marks: list[tuple[str, float, float]] = []

    def phase(name: str, action: Any) -> None:
        print(f"{time.monotonic() - t0:6.1f} s  phase {name}", flush=True)
        began = time.monotonic()
        action()
        time.sleep(args.phase_s)
        marks.append((name, began, time.monotonic()))

    def spawn(mode: str) -> tuple[list[Any], Any, Any]:
        ready, go = ctx.Queue(), ctx.Event()
        procs = [ctx.Process(target=_neighbour, args=(mode, ready, go)) for _ in range(args.count)]
        for p in procs:
            p.start()
        return procs, ready, go

    phase("quiet", lambda: None)
    procs, ready, go = spawn("idle")  # go kept: a dropped Event's semaphore is unlinked
    for _ in procs:
        ready.get(timeout=120)
    print(f"{time.monotonic() - t0:6.1f} s  neighbours up", flush=True)
    phase("idle", lambda: None)
    def signal_all(sig: int) -> None:
        for p in procs:
            os.kill(p.pid, sig)

    phase("stopped", lambda: signal_all(signal.SIGSTOP))
    for p in procs:
        os.kill(p.pid, signal.SIGCONT)
    phase("leave", lambda: signal_all(signal.SIGKILL))
    for p in procs:
        p.join()
    phase("quiet again", lambda: None)
    starters, ready, go = spawn(args.start_mode)
    time.sleep(5)  # imported torch, waiting to create their contexts
    phase("start", go.set)
    for _ in starters:
        ready.get(timeout=120)
    for p in starters:
        p.kill()
        p.join()
    stop.set()
    print(f"{time.monotonic() - t0:6.1f} s  collecting", flush=True)
    samples = _collect(rounds)
    timer.join(10)
    report = _report(args.count, samples, marks)
    print(json.dumps(report, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
