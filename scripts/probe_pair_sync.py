"""Probe: what a synchronised step costs when two processes share one GPU (no MPS).

Process A (the judge's role) and B (the kernel's) ping-pong over a pipe. Per round, on A's
host clock: A copies a small tensor and synchronises (alone), hands over, B copies a small tensor
(into its own memory, or into A's memory through CUDA IPC) and synchronises, answers, A copies
and synchronises again. Also the same steps in one process. Prints medians in microseconds.

PIN_JUDGE and PIN_PARTNER (CPU lists, e.g. "2" or "2,3") pin the two processes; the rounds'
totals are reported with their 10th and 90th percentiles beside the steps' medians.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch
import torch.multiprocessing as mp

ROUNDS = 300


def spin_recv(conn):
    while not conn.poll(0):
        pass
    return conn.recv()


def pin(variable):
    cpus = os.environ.get(variable)
    if cpus:
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})


def partner(conn, shared):
    pin("PIN_PARTNER")
    torch.cuda.init()
    mine = torch.zeros(1024, device="cuda")
    src = torch.ones(1024, device="cuda")
    conn.send("ready")
    while True:
        msg = spin_recv(conn)
        if msg == "stop":
            return
        t0 = time.perf_counter_ns()
        (shared if msg == "ipc" else mine).copy_(src)
        torch.cuda.synchronize()
        t1 = time.perf_counter_ns()
        conn.send((t0, t1))


def step(x, y):
    t0 = time.perf_counter_ns()
    x.copy_(y)
    torch.cuda.synchronize()
    return (time.perf_counter_ns() - t0) / 1e3


def main():
    pin("PIN_JUDGE")
    out = {"pin_judge": os.environ.get("PIN_JUDGE"), "pin_partner": os.environ.get("PIN_PARTNER")}
    a = torch.zeros(1024, device="cuda")
    b = torch.ones(1024, device="cuda")
    torch.cuda.synchronize()
    out["one_process_copy_sync_us"] = statistics.median(step(a, b) for _ in range(ROUNDS))
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    shared = torch.zeros(1024, device="cuda")
    proc = ctx.Process(target=partner, args=(there, shared))
    proc.start()
    assert here.recv() == "ready"
    for mode in ("own", "ipc"):
        rows = []
        for _ in range(ROUNDS):
            before = step(a, b)
            t_send = time.perf_counter_ns()
            here.send(mode)
            k0, k1 = spin_recv(here)
            t_back = time.perf_counter_ns()
            after = step(a, b)
            rows.append((before, (k0 - t_send) / 1e3, (k1 - k0) / 1e3, (t_back - k1) / 1e3, after))
        cols = ("judge_copy_sync", "to_partner", "partner_copy_sync", "to_judge", "judge_copy_sync_after")
        out[mode] = {c: statistics.median(r[i] for r in rows) for i, c in enumerate(cols)}
        totals = sorted(sum(r) for r in rows)
        out[mode]["total_p10_p50_p90"] = [totals[len(totals) // 10], totals[len(totals) // 2],
                                          totals[len(totals) * 9 // 10]]
    # the stream gate: held, a copy enqueued, released, synchronised (release -> synced)
    sys.path.insert(0, ".")
    from harness.stream_gate import open_gate

    gate = open_gate(torch, torch.cuda.current_stream())
    if gate is not None:
        rows = []
        for _ in range(ROUNDS):
            gate.hold()
            a.copy_(b)
            t0 = time.perf_counter_ns()
            gate.release()
            torch.cuda.synchronize()
            rows.append((time.perf_counter_ns() - t0) / 1e3)
        out["gate_release_to_synced_us"] = statistics.median(rows)
    # a GPU sleep of 20 us then a copy, synchronised (the sleep's lead instead of the gate)
    rows = []
    for _ in range(ROUNDS):
        torch.cuda._sleep(int(20e-6 * 1.98e9))
        a.copy_(b)
        t0 = time.perf_counter_ns()
        torch.cuda.synchronize()
        rows.append((time.perf_counter_ns() - t0) / 1e3)
    out["sleep20us_copy_synced_us"] = statistics.median(rows)
    # alone again, with the partner's context idle
    out["one_process_copy_sync_us_partner_idle"] = statistics.median(step(a, b) for _ in range(ROUNDS))
    here.send("stop")
    proc.join()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    sys.exit(main())
