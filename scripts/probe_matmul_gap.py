"""Why a cuBLAS fp16 matmul reads further above ncu than other kernels: what the L2 flush and
the kernel just before a timed call do to its CUDA events. A probe, not a test.

    python scripts/probe_matmul_gap.py flush       # bench/results/judge_h100_2026-11-26e/matmul_flush_2.log
    python scripts/probe_matmul_gap.py neighbour   # .../matmul_neighbour_5.log
    python scripts/probe_matmul_gap.py refill      # bench/results/h100_2026-11-26f/matmul_refill_3.log
    python scripts/probe_matmul_gap.py contexts    # .../matmul_contexts_5.log
    python scripts/probe_matmul_gap.py idle        # .../matmul_idle_6.log

``flush``: an fp16 2048² matmul and a 12M-element add, timed as the server's timer does (stream
held, events, one call) after the timer's read flush, after none, after a write flush, after the
flush and a touch of the inputs' pages, and two calls per interval; then ncu with and without its
cache control and clock control. ``neighbour``: fp16 matmuls of 2048² and 4096² and the add,
after the flush, after a 64 MB read, after the flush and a one-element kernel, after the flush and
the same matmul on other data, and after nothing; figures less the timer's zero, ncu beside.
``refill``: the inputs written again before the flush (as the server's samples do), the flush
twice, the inputs' pages touched after it. ``contexts``: alone on the GPU, beside six idle
processes with CUDA contexts (a server's spares), beside them stopped, alone again. ``idle``:
the GPU idle 0.2-5 ms between the flush and the sample, and a kernel over every SM just before.

The logs were taken with the probe's first, untidy form, when the timer ran nothing before a
sample. The timer now runs a one-element kernel before every sample, so a rerun reads every
case as "then one element" did then.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

NCU_SCRIPT = '''import sys, torch
n = {"mm2048": 2048, "mm4096": 4096}.get(sys.argv[1])
if n:
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(2))
    fn = lambda: a @ b
else:
    x, y = (torch.randn(12 << 20, device="cuda") for _ in range(2))
    fn = lambda: torch.add(x, y)
for _ in range(3):
    fn()
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("r")
for _ in range(9):
    fn()
torch.cuda.synchronize()
torch.cuda.nvtx.range_pop()
'''


def ncu_us(ncu: str, case: str, cache: str = "all", clock: str = "none") -> list[float]:
    """ncu's gpu__time_duration of each of 9 calls of ``case`` (us)."""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "case.py"
        script.write_text(NCU_SCRIPT)
        done = subprocess.run(
            [ncu, "--nvtx", "--nvtx-include", "r/", "--metrics", "gpu__time_duration.sum",
             "--csv", "--clock-control", clock, "--cache-control", cache, sys.executable,
             str(script), case], capture_output=True, text=True, check=False)
    return [float(line.split('","')[-1].strip('"').replace(",", "")) / 1e3
            for line in done.stdout.splitlines() if "gpu__time_duration" in line]


class Bench:
    """The server's timer, and the tensors the cases read."""

    def __init__(self) -> None:
        import torch

        from harness.timer import bind

        self.torch = torch
        self.timer = bind("cuda")
        self.big = torch.empty(256 << 20, device="cuda", dtype=torch.int8)
        self.l2_and_a_third = torch.zeros(16 << 20, dtype=torch.int32, device="cuda")
        self.one = torch.empty(1, device="cuda")
        x, y = (torch.randn(12 << 20, device="cuda") for _ in range(2))
        self.cases: dict[str, Callable[[], Any]] = {"add": lambda: torch.add(x, y)}
        self.inputs: dict[str, tuple[Any, Any]] = {"add": (x, y)}
        for n in (2048, 4096):
            a, b = self.matrices(n)
            self.inputs[f"mm{n}"] = (a, b)
            self.cases[f"mm{n}"] = functools.partial(torch.matmul, a, b)

    def matrices(self, n: int) -> tuple[Any, Any]:
        torch = self.torch
        return (torch.randn(n, n, device="cuda", dtype=torch.float16),
                torch.randn(n, n, device="cuda", dtype=torch.float16))

    def median_us(self, fn: Callable[[], Any], before: Callable[[], Any], calls: int = 1,
                  samples: int = 200) -> float:
        """The median events' interval of ``calls`` calls after ``before`` (us), less the
        timer's zero."""
        timer = self.timer
        timer.warm_up(fn)

        def many() -> None:
            for _ in range(calls):
                fn()
        taken = []
        for _ in range(samples):
            before()
            timer.sync()
            taken.append(timer.sample(many, flush=False)[0] * 1e3)
        return round(statistics.median(taken) - timer.event_zero_ms * 1e3, 3)


def flush(bench: Bench, ncu: str | None) -> None:
    timer = bench.timer
    a, b = bench.inputs["mm2048"]

    def touch() -> None:
        timer.flush()
        a.view(-1)[::16384].sum()
        b.view(-1)[::16384].sum()
    for name in ("mm2048", "add"):
        fn = bench.cases[name]
        row = {"read_flush": bench.median_us(fn, timer.flush),
               "no_flush": bench.median_us(fn, lambda: None),
               "write_flush": bench.median_us(fn, bench.big.zero_),
               "read_flush_x2": bench.median_us(fn, timer.flush, calls=2)}
        if name == "mm2048":
            row["read_flush_touch"] = bench.median_us(fn, touch)
        print(name, row, flush=True)
    if ncu is None:
        return
    for name in ("mm2048", "add"):
        for cache in ("all", "none"):
            for clock in ("none", "base"):
                print(name, "ncu", cache, clock, ncu_us(ncu, name, cache, clock), flush=True)


def then(first: Callable[[], Any], second: Callable[[], Any]) -> Callable[[], None]:
    def both() -> None:
        first()
        second()
    return both


def neighbour(bench: Bench, ncu: str | None) -> None:
    timer = bench.timer
    for name, fn in bench.cases.items():
        before: dict[str, Callable[[], Any]] = {
            "read_flush": timer.flush,
            "read_64MB": bench.l2_and_a_third.sum,
            "read_flush_then_one_element": then(timer.flush, bench.one.zero_),
            "no_flush": lambda: None,
        }
        if name.startswith("mm"):
            e, f = bench.matrices(int(name[2:]))
            before["read_flush_then_same_kernel"] = then(timer.flush,
                                                         functools.partial(bench.torch.matmul, e, f))
        row = {what: bench.median_us(fn, pre) for what, pre in before.items()}
        print(name, row, "zero_us", round(timer.event_zero_ms * 1e3, 3), flush=True)
    if ncu is None:
        return
    for name in bench.cases:
        print(name, "ncu us median", statistics.median(ncu_us(ncu, name) or [0.0]), flush=True)


def _write(tensors: list[Any], values: list[Any]) -> None:
    for t, v in zip(tensors, values, strict=True):
        t.copy_(v)


def _touch(tensors: list[Any]) -> None:
    for t in tensors:
        t.view(-1)[::16384].sum()  # one element of every 64 KiB (fp32) or 32 KiB (fp16)


def refill(bench: Bench, ncu: str | None) -> None:
    """Inputs written again before each sample, as the server does (dirty lines in the L2
    before the flush), then the timer's flush once or twice, or the flush and a touch of one
    element of every 64 KiB of the inputs (their address translations warm)."""
    timer, torch = bench.timer, bench.torch
    for name in ("mm2048", "add"):
        fn = bench.cases[name]
        inputs = list(bench.inputs[name])
        write = functools.partial(_write, inputs, [torch.randn_like(t) for t in inputs])
        touch = functools.partial(_touch, inputs)
        before: dict[str, Callable[[], Any]] = {
            "flush": timer.flush,
            "write_then_flush": then(write, timer.flush),
            "write_then_flush_x2": then(write, then(timer.flush, timer.flush)),
            "write_then_flush_touch": then(write, then(timer.flush, touch)),
            "flush_touch": then(timer.flush, touch),
        }
        row = {what: bench.median_us(fn, pre) for what, pre in before.items()}
        print(name, len(inputs), "inputs", row, "zero_us", round(timer.event_zero_ms * 1e3, 3),
              flush=True)
    if ncu is None:
        return
    for name in ("mm2048", "add"):
        print(name, "ncu us median", statistics.median(ncu_us(ncu, name) or [0.0]), flush=True)


IDLE_NEIGHBOUR = ("import sys, torch; a = torch.randn(1024, 1024, device='cuda'); (a @ a).sum().item();"
                  " print('up', flush=True); sys.stdin.readline()")


def contexts(bench: Bench, ncu: str | None, count: int = 6) -> None:
    """The same cases alone on the GPU, beside ``count`` idle processes with contexts (a
    server's spares), beside them stopped (SIGSTOP, as during a server's timing), and alone
    again."""
    import signal

    def row(label: str) -> None:
        figures = {name: bench.median_us(bench.cases[name], bench.timer.flush)
                   for name in ("mm2048", "add")}
        print(label, figures, flush=True)
    row("alone")
    procs = [subprocess.Popen([sys.executable, "-c", IDLE_NEIGHBOUR], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for _ in range(count)]
    for proc in procs:
        assert proc.stdout is not None
        proc.stdout.readline()
    try:
        row(f"beside {count} idle contexts")
        for proc in procs:
            proc.send_signal(signal.SIGSTOP)
        row(f"beside {count} stopped")
        for proc in procs:
            proc.send_signal(signal.SIGCONT)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    row("alone again")


def idle(bench: Bench, ncu: str | None) -> None:
    """The flush, then the GPU idle for a while (as between a server's samples, where null
    calls and hand-overs sit), then the sample; and the same with a kernel over every SM just
    before it (a 1 MiB write, a 1 or 4 MiB read) instead of the timer's one-element kernel alone."""
    timer = bench.timer
    wide = bench.l2_and_a_third[: 1 << 18]

    def pause(seconds: float) -> Callable[[], None]:
        return functools.partial(time.sleep, seconds)
    for name in ("mm2048", "add"):
        fn = bench.cases[name]
        before: dict[str, Callable[[], Any]] = {
            "flush": timer.flush,
            "flush_idle_0.2ms": then(timer.flush, pause(0.0002)),
            "flush_idle_1ms": then(timer.flush, pause(0.001)),
            "flush_idle_5ms": then(timer.flush, pause(0.005)),
            "flush_idle_1ms_wide_kernel": then(then(timer.flush, pause(0.001)), wide.zero_),
            "flush_wide_kernel": then(timer.flush, wide.zero_),
            "flush_wide_read": then(timer.flush, wide.sum),
            "flush_wide_read_4MiB": then(timer.flush, bench.l2_and_a_third[: 1 << 20].sum),
        }
        print(name, {what: bench.median_us(fn, pre) for what, pre in before.items()}, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["flush", "neighbour", "refill", "contexts", "idle"])
    args = parser.parse_args()
    from profiling.ncu import find_ncu

    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    bench = Bench()
    {"flush": flush, "neighbour": neighbour, "refill": refill,
     "contexts": contexts, "idle": idle}[args.part](bench, find_ncu("ncu"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
