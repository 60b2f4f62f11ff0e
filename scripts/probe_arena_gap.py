"""Why a judged sample reads a cuBLAS fp16 matmul ~0.5-1 us longer than the same timer alone in
one process: the arena's imported memory, or the judge's context running just before. A probe,
not a test.

    python scripts/probe_arena_gap.py            # the judge: starts its kernel process itself

Two processes, as in a comparison: this one (the judge) makes an arena (:mod:`harness.arena`)
with the inputs of an fp16 2048² matmul and of a 12M-element fp32 add; the kernel process
maps it, and makes local copies of the same inputs. For each case the kernel process times
the call with the server's timer (:func:`harness.timer.bind`), 41 samples:

- ``self``: the kernel process flushes the L2 itself (no judge activity between samples);
- ``judge``: the judge writes the inputs into the arena, flushes and synchronises in its own
  context, then asks for the sample (the server's path);
- ``touch``: before the sample the kernel process reads one byte of every 64 KB (or 2 MB) of
  the inputs and of the output (the pages' translations warm, ~nothing in the L2), and
  reports that read's own time (synchronised); ``touch -1``: one byte per 64 KB of the whole
  arena and of the output, two reductions (the server's page warm-up); ``-2`` the same bytes
  gathered (``torch.take``), ``-3`` copied into a small buffer;

on the arena's inputs and on the local copies. Each figure is the median less the timer's zero.
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.timer import TRANSLATION_PAGE_BYTES as PAGE  # (after the path)

SAMPLES = 41
CASES = [(where, driver, touch) for where in ("arena", "local") for driver in ("self", "judge")
         for touch in (0, PAGE)] + [("arena", "judge", t) for t in (2 << 20, -1, -2, -3)]


def make_inputs(torch):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1)
    mm = [torch.randn(2048, 2048, device="cuda", dtype=torch.float16, generator=gen)
          for _ in range(2)]
    add = [torch.randn(12 << 20, device="cuda", generator=gen) for _ in range(2)]
    return {"mm": mm, "add": add}


def pages(torch, tensors, stride):
    """A function reading one byte of every ``stride`` bytes of ``tensors``."""
    views = [t.reshape(-1).view(torch.uint8)[::stride] for t in tensors]

    def touch() -> None:
        for v in views:
            v.max()
    return touch


def kernel_process(layout_json: str, fd: int) -> None:
    import torch

    from harness.arena import Arena
    from harness.timer import bind
    from shared.protocol import ArenaLayout

    timer = bind("cuda")
    arena = Arena.attach(ArenaLayout.model_validate_json(layout_json), fd, "cuda")
    local = make_inputs(torch)
    shared = {"mm": arena.inputs[0:2], "add": arena.inputs[2:4]}
    outs = {"mm": torch.empty(2048, 2048, device="cuda", dtype=torch.float16),
            "add": torch.empty(12 << 20, device="cuda")}
    ops = {"mm": lambda a, b: torch.mm(a, b, out=outs["mm"]),
           "add": lambda a, b: torch.add(a, b, out=outs["add"])}
    warmed: set[tuple[str, str]] = set()
    # the whole arena and the output, one byte per page: reduced (the server's), gathered, copied
    whole = arena.memory.reshape(-1)
    arena_pages = whole[::PAGE]
    out_pages = {k: v.reshape(-1).view(torch.uint8)[::PAGE] for k, v in outs.items()}
    where_arena = torch.arange(0, whole.numel(), PAGE, device="cuda")
    where_out = {k: torch.arange(0, v.numel() * v.element_size(), PAGE, device="cuda")
                 for k, v in outs.items()}
    sinks = {k: torch.empty(v.numel(), dtype=torch.uint8, device="cuda")
             for k, v in out_pages.items()}
    sink_arena = torch.empty(arena_pages.numel(), dtype=torch.uint8, device="cuda")

    def reduced(name: str) -> None:
        arena_pages.sum()
        out_pages[name].sum()

    def gathered(name: str) -> None:
        torch.take(whole, where_arena)
        torch.take(outs[name].reshape(-1).view(torch.uint8), where_out[name])

    def copied(name: str) -> None:
        sink_arena.copy_(arena_pages)
        sinks[name].copy_(out_pages[name])

    touches = {-1: reduced, -2: gathered, -3: copied}
    for line in sys.stdin:
        name, where, touch = line.split()
        a, b = (shared if where == "arena" else local)[name]
        fn = ops[name]
        key = (name, where)
        if key not in warmed:
            warmed.add(key)
            for _ in range(20):
                fn(a, b)
            timer.sync()
            timer.measure_zero()
        touched_us = None
        if int(touch):
            timer.sync()
            began = time.perf_counter_ns()
            if int(touch) > 0:
                pages(torch, [a, b, outs[name]], int(touch))()
            else:
                touches[int(touch)](name)
            timer.sync()
            touched_us = (time.perf_counter_ns() - began) / 1e3
        self_flush = os.environ.get("PROBE_DRIVER") == "self"
        if self_flush:
            timer.flush()
        ms, _ = timer.sample(functools.partial(fn, a, b), flush=False)
        print(json.dumps({"us": ms * 1e3, "zero_us": timer.event_zero_ms * 1e3,
                          "touch_us": touched_us}), flush=True)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--kernel":
        kernel_process(sys.argv[2], int(sys.argv[3]))
        return 0
    import torch

    from harness.arena import Arena, plan
    from harness.timer import bind

    timer = bind("cuda")
    inputs = make_inputs(torch)
    values = inputs["mm"] + inputs["add"]
    outputs = [inputs["mm"][0] @ inputs["mm"][1], torch.add(*inputs["add"])]
    arena = Arena.create(plan(values, outputs, "device"), "cuda")
    for slot, t in zip(arena.inputs, values):
        slot.copy_(t)
    torch.cuda.synchronize()
    rows = []
    for where, driver, touch in CASES:
        env = {**os.environ, "PROBE_DRIVER": driver}
        child = subprocess.Popen(
            [sys.executable, __file__, "--kernel", arena.layout.model_dump_json(),
             str(arena.fd)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            pass_fds=[arena.fd], env=env)
        assert child.stdin is not None and child.stdout is not None
        row: dict[str, object] = {"inputs": where, "driver": driver, "touch": touch}
        for name, first in (("mm", 0), ("add", 2)):
            taken: list[float] = []
            touches: list[float] = []
            for i in range(SAMPLES + 3):
                if driver == "judge":
                    for slot, t in zip(arena.inputs[first:first + 2], inputs[name]):
                        slot.copy_(t)
                    timer.flush()
                    timer.sync()
                child.stdin.write(f"{name} {where} {touch}\n")
                child.stdin.flush()
                got = json.loads(child.stdout.readline())
                if i >= 3:
                    taken.append(got["us"] - got["zero_us"])
                    if got["touch_us"] is not None:
                        touches.append(got["touch_us"])
            row[name + "_us"] = round(statistics.median(taken), 3)
            row[name + "_p10_us"] = round(sorted(taken)[SAMPLES // 10], 3)
            if touches:  # the touch's own host time, synchronised
                row[name + "_touch_us"] = round(statistics.median(touches), 1)
        child.stdin.close()
        child.wait()
        rows.append(row)
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
