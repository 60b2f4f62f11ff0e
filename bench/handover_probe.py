"""Measure a trusted clock across two CUDA contexts: what a timed call costs and how stable the
cost is when the judge's own stream timestamps it and the two processes hand over on the GPU.

    python3 bench/handover_probe.py --out handover.json

The judge (this process) and a partner (a child process, its own CUDA context) share GPU
memory (harness.device_memory). Per sample, behind a gate on the judge's stream (a host word
the stream waits on), the judge enqueues: event T0, the inputs copied into the shared slots,
an L2 flush, "go" written; then waits on the GPU for "done" and copies the outputs into its
own memory, event T1. The partner enqueues: wait for "go", the call (between its own events),
"done" written, and answers; the judge then opens the gate. No host round trip falls between
T0 and T1. Variants: the partner's call empty (the fixed cost), elementwise adds of several
sizes and an fp32 matmul; the partner's "done" written by its host after a device
synchronise (``sync_done``), for work on streams the call does not join.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GEQ = 0x0
WORDS = 4096  # bytes kept for the control words at the start of the shared memory


def driver():  # type: ignore[no-untyped-def]
    lib = ctypes.CDLL("libcuda.so.1")
    for name in ("cuStreamWaitValue32_v2", "cuStreamWriteValue32_v2"):
        fn = getattr(lib, name, None) or getattr(lib, name.removesuffix("_v2"))
        fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        fn.restype = ctypes.c_int
    wait = getattr(lib, "cuStreamWaitValue32_v2", None) or lib.cuStreamWaitValue32
    write = getattr(lib, "cuStreamWriteValue32_v2", None) or lib.cuStreamWriteValue32
    return lib, wait, write


def check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what}: CUDA error {status}")


def q(values: list[float]) -> dict[str, float]:
    s = sorted(values)
    n = len(s)

    def at(p: float) -> float:
        return s[min(n - 1, max(0, int(round(p * (n - 1)))))]
    return {"median": statistics.median(s), "p10": at(0.1), "p25": at(0.25), "p75": at(0.75),
            "p90": at(0.9), "min": s[0], "max": s[-1], "n": n}


# ---------------------------------------------------------------- partner (child process)

def partner(sock_fd: int) -> None:
    import torch

    from harness import device_memory
    sock = socket.socket(fileno=sock_fd)
    msg, fds, _, _ = socket.recv_fds(sock, 4096, 4)
    spec = json.loads(msg)
    torch.cuda.init()
    region = device_memory.Region.attach(fds[0], spec["size"], torch.device("cuda"))
    os.close(fds[0])
    base = region.bytes()
    lib, wait, write = driver()
    stream = torch.cuda.Stream()
    raw = ctypes.c_void_p(stream.cuda_stream)
    go_addr, done_addr = region.ptr, region.ptr + 256
    s_ev, e_ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    pending: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
    views: dict[str, object] = {}
    sock.sendall(b"ready\n")
    f = sock.makefile("rb")
    while True:
        line = f.readline()
        if not line:
            return
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            return
        if cmd["op"] == "bind":
            n = cmd["n"]
            fl = base[WORDS:WORDS + 3 * n * 4].view(torch.float32)
            views["a"], views["b"], views["c"] = fl[:n], fl[n:2 * n], fl[2 * n:3 * n]
            # every kernel's first launch outside a gate: a lazily loaded module waits for the
            # context to go idle, and a stream held on the gate never does
            with torch.cuda.stream(stream):
                torch.add(views["a"], views["b"], out=views["c"])  # type: ignore[arg-type]
                if cmd.get("mm"):
                    m = cmd["mm"]
                    out = views["a"][: m * m].view(m, m) @ views["b"][: m * m].view(m, m)
                    views["c"][: m * m].copy_(out.reshape(-1))  # type: ignore[index]
            torch.cuda.synchronize()
            sock.sendall(b"ok\n")
            continue
        i, kind = cmd["i"], cmd["kind"]
        s_ev, e_ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            check(wait(raw, go_addr, i, GEQ), "wait go")
            s_ev.record(stream)
            if kind == "add":
                torch.add(views["a"], views["b"], out=views["c"])  # type: ignore[arg-type]
            elif kind == "mm":
                m = cmd["mm"]
                x = views["a"][: m * m].view(m, m)  # type: ignore[index]
                y = views["b"][: m * m].view(m, m)  # type: ignore[index]
                out = x @ y  # (a returned tensor: copied into the slot, as a harness must)
                views["c"][: m * m].copy_(out.reshape(-1))  # type: ignore[index]
            e_ev.record(stream)
            if not cmd.get("sync_done"):
                check(write(raw, done_addr, i, 0), "write done")
        pending.append((s_ev, e_ev))
        sock.sendall(b"enq\n")
        if cmd.get("sync_done"):
            torch.cuda.synchronize()
            with torch.cuda.stream(stream):
                check(write(raw, done_addr, i, 0), "write done")
        if cmd.get("report"):
            torch.cuda.synchronize()
            ms = [a.elapsed_time(b) for a, b in pending]
            pending.clear()
            sock.sendall((json.dumps(ms) + "\n").encode())


# ---------------------------------------------------------------- judge (this process)

def judge(out: Path, samples: int) -> None:
    import torch

    from harness import device_memory
    torch.cuda.init()
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 0)) or 50 * 2**20
    sizes = {"null": 0, "add_5us": 1 << 17, "add_20us": 5 << 20, "add_50us": 13 << 20,
             "add_300us": 80 << 20, "add_1ms": 270 << 20}
    nmax = max(sizes.values())
    size = WORDS + 3 * nmax * 4 + 64
    region = device_memory.Region.create(size, dev)
    base = region.bytes()
    base[:WORDS].zero_()
    torch.cuda.synchronize()
    lib, wait, write = driver()
    ours, theirs = socket.socketpair()
    child = subprocess.Popen([sys.executable, __file__, "--partner", str(theirs.fileno())],
                             pass_fds=[theirs.fileno()], cwd=str(ROOT))
    theirs.close()
    socket.send_fds(ours, [json.dumps({"size": size}).encode()], [region.fd])
    f = ours.makefile("rb")
    assert f.readline().strip() == b"ready"
    stream = torch.cuda.Stream()
    raw = ctypes.c_void_p(stream.cuda_stream)
    gate = torch.zeros(1, dtype=torch.int32, pin_memory=True)
    gate_dev = ctypes.c_uint64()
    lib.cuMemHostGetDevicePointer_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64),
                                                 ctypes.c_void_p, ctypes.c_uint]
    check(lib.cuMemHostGetDevicePointer_v2(ctypes.byref(gate_dev),
                                           ctypes.c_void_p(gate.data_ptr()), 0), "gate ptr")
    gate_word = ctypes.c_uint32.from_address(gate.data_ptr())
    go_addr, done_addr = region.ptr, region.ptr + 256
    flush = torch.zeros(2 * l2 // 4, dtype=torch.int32, device=dev)
    result: dict[str, object] = {"device": props.name, "l2_bytes": l2,
                                 "torch": torch.__version__, "samples": samples}
    counter = [0]

    def send(obj: dict) -> None:
        ours.sendall((json.dumps(obj) + "\n").encode())

    def run(name: str, kind: str, n: int, mm: int = 0, sync_done: bool = False,
            flush_on: bool = True) -> dict:
        send({"op": "bind", "n": max(n, 1), "mm": mm})
        assert f.readline().strip() == b"ok"
        fl = base[WORDS:WORDS + 3 * max(n, 1) * 4].view(torch.float32)
        slot_a, slot_b, slot_c = fl[:max(n, 1)], fl[max(n, 1):2 * max(n, 1)], \
            fl[2 * max(n, 1):3 * max(n, 1)]
        srcs = [(torch.randn(max(n, 1), device=dev), torch.randn(max(n, 1), device=dev))
                for _ in range(2)]
        held = torch.empty(slot_c.numel(), device=dev)
        with torch.cuda.stream(stream):  # (the judge's own kernels loaded before any gate)
            slot_a.copy_(srcs[0][0])
            flush.sum()
            held.copy_(slot_c[: held.numel()])
        torch.cuda.synchronize()
        released = 0
        intervals, walls = [], []
        for s in range(samples + 10):
            counter[0] += 1
            i = counter[0]
            a, b = srcs[s % 2]
            t_wall = time.perf_counter()
            t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(stream):
                check(wait(raw, gate_dev.value, i, GEQ), "gate")
                t0.record(stream)
                if n:
                    slot_a.copy_(a)
                    slot_b.copy_(b)
                if flush_on:
                    flush.sum()
                check(write(raw, go_addr, i, 0), "write go")
                check(wait(raw, done_addr, i, GEQ), "wait done")
                held.copy_(slot_c[: held.numel()])
                t1.record(stream)
            send({"op": "call", "i": i, "kind": kind, "mm": mm, "sync_done": sync_done,
                  "report": s == samples + 9})
            if not select.select([ours], [], [], 0.05)[0]:
                released += 1  # the watchdog: the partner is stuck behind the gate
                gate_word.value = i
            assert f.readline().strip() == b"enq"
            gate_word.value = i
            t1.synchronize()
            walls.append((time.perf_counter() - t_wall) * 1e3)
            if s >= 10:
                intervals.append(t0.elapsed_time(t1))
        own = json.loads(f.readline())[10:]
        diff = [a - b for a, b in zip(intervals, own)]
        entry = {"interval_ms": q(intervals), "partner_events_ms": q(own),
                 "interval_less_events_ms": q(diff), "wall_ms": q(walls[10:]),
                 "watchdog_releases": released}
        result[name] = entry
        print(name, json.dumps({k: round(v["median"], 5) for k, v in entry.items()
                           if isinstance(v, dict)}),
              "iqr", round(entry["interval_ms"]["p75"] - entry["interval_ms"]["p25"], 5),
              "released", released, flush=True)
        return entry

    print("partner ready", flush=True)
    for rep in range(2):
        run(f"null_{rep}", "null", 0)
        for name, n in sizes.items():
            if n:
                run(f"{name}_{rep}", "add", n)
        run(f"mm1024_{rep}", "mm", 1024 * 1024, mm=1024)
        run(f"mm2048_{rep}", "mm", 2048 * 2048, mm=2048)
        run(f"null_sync_done_{rep}", "null", 0, sync_done=True)
        run(f"add_20us_sync_done_{rep}", "add", sizes["add_20us"], sync_done=True)
        run(f"null_noflush_{rep}", "null", 0, flush_on=False)
        run(f"add_20us_noflush_{rep}", "add", sizes["add_20us"], flush_on=False)
    # the judge's own copy + flush, timed in its context alone (what the fixed cost holds)
    own = []
    for _ in range(50):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        flush.sum()
        e1.record()
        torch.cuda.synchronize()
        own.append(e0.elapsed_time(e1))
    result["judge_flush_alone_ms"] = q(own)
    send({"op": "quit"})
    child.wait(timeout=30)
    out.write_text(json.dumps(result, indent=1))
    print("flush alone", q(own)["median"])


def allocator_probe() -> dict:
    """Whether torch takes an allocator of ctypes callbacks for a memory pool here."""
    import torch
    info: dict[str, object] = {"custom": hasattr(torch._C, "_cuda_customAllocator"),
                               "mempool": hasattr(torch.cuda, "MemPool")}
    try:
        lib = ctypes.CDLL("libcudart.so", mode=ctypes.RTLD_GLOBAL)
    except OSError:
        lib = None
    try:
        ALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int,
                                 ctypes.c_void_p)
        FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int,
                                ctypes.c_void_p)
        drv = ctypes.CDLL("libcuda.so.1")
        drv.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        drv.cuMemFree_v2.argtypes = [ctypes.c_uint64]
        seen = []

        def alloc(size, device, stream):  # type: ignore[no-untyped-def]
            p = ctypes.c_uint64()
            check(drv.cuMemAlloc_v2(ctypes.byref(p), size), "alloc")
            seen.append(size)
            return p.value

        def free(ptr, size, device, stream):  # type: ignore[no-untyped-def]
            drv.cuMemFree_v2(ptr)

        a, fr = ALLOC(alloc), FREE(free)
        cb = torch._C._cuda_customAllocator(ctypes.cast(a, ctypes.c_void_p).value,
                                            ctypes.cast(fr, ctypes.c_void_p).value)
        pool = torch.cuda.MemPool(cb)
        with torch.cuda.use_mem_pool(pool):
            x = torch.randn(1000, 1000, device="cuda")
            y = x @ x
        torch.cuda.synchronize()
        info["allocs_seen"] = seen
        info["works"] = bool(seen) and float(y.sum()) == float(y.sum())
        info["keep"] = (a, fr, cb, pool)
    except Exception as exc:  # noqa: BLE001
        info["error"] = f"{type(exc).__name__}: {exc}"
    info.pop("keep", None)
    return info


def ncu_target() -> None:
    """The probe's calls alone, for Nsight Compute (``--nvtx-include timed/``)."""
    import torch
    sizes = [1 << 17, 5 << 20, 13 << 20, 80 << 20, 270 << 20]
    for n in sizes:
        a, b, c = (torch.randn(n, device="cuda") for _ in range(3))
        for _ in range(5):
            torch.cuda.nvtx.range_push("timed")
            torch.add(a, b, out=c)
            torch.cuda.nvtx.range_pop()
    for m in (1024, 2048):
        x, y = torch.randn(m, m, device="cuda"), torch.randn(m, m, device="cuda")
        for _ in range(5):
            torch.cuda.nvtx.range_push("timed")
            x @ y
            torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--partner", type=int)
    ap.add_argument("--out", type=Path, default=Path("handover.json"))
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--ncu-target", action="store_true")
    args = ap.parse_args()
    if args.ncu_target:
        ncu_target()
    elif args.partner is not None:
        partner(args.partner)
    else:
        judge(args.out, args.samples)
        print("allocator", json.dumps(allocator_probe()))
