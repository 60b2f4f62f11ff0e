"""What CUDA MPS would change for a fresh process per job: a client's start and exit, a kernel's
timing, and what a client's fatal GPU fault does to the others. A probe, not a test
(issue 26's "know the floor"; docs/WORKER_DESIGN.md).

    python scripts/probe_mps.py --out mps.json      # gpu_evidence.sh mps

Each part runs twice, as plain processes (each its own CUDA context) and as clients of an MPS
control daemon this probe starts in a private pipe directory and quits at the end:

- ``start_exit``: beside ``--neighbours`` idle processes of the same kind (a server's spares), a
  fresh process imports torch, creates its context and runs a cuBLAS matmul (ready), then is
  SIGKILLed: spawn to ready (its import, context and first matmul apart), and SIGKILL to
  reaped. With MPS the client's teardown is the MPS server's, after the client is gone.
- ``timing``: the median of 200 CUDA-event samples of a 12M-element add (read-flushed L2),
  per mode, beside the idle neighbours.
- ``fault``: a victim runs matmuls and synchronises in a loop; 2 s into it another process of
  the same kind, started and armed beforehand, makes a fatal fault (a write to an unmapped
  address through cupy, else a device-side assert). What the victim saw (its calls per half
  second, its error and when), and whether a new process starts afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CLIENT = r'''
import json, os, sys, time
t0 = time.perf_counter()
import torch
imported = time.perf_counter()
role = sys.argv[1]
def say(**kw):
    print(json.dumps(kw), flush=True)
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
ctx = time.perf_counter()
a = torch.randn(1024, 1024, device="cuda"); b = a @ a; torch.cuda.synchronize()
say(ready=True, import_ms=(imported - t0) * 1e3, context_ms=(ctx - imported) * 1e3, first_matmul_ms=(time.perf_counter() - ctx) * 1e3)
if role == "idle":
    sys.stdin.readline()
elif role == "timing":
    x, y = (torch.randn(12 << 20, device="cuda") for _ in range(2))
    flush = torch.zeros(2 * 50 * 2**20 // 4, dtype=torch.int32, device="cuda")
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(20):
        torch.add(x, y)
    taken = []
    for _ in range(200):
        flush.sum(); torch.cuda.synchronize()
        s.record(); torch.add(x, y); e.record(); torch.cuda.synchronize()
        taken.append(s.elapsed_time(e) * 1e3)
    taken.sort()
    say(median_us=taken[len(taken) // 2], p10_us=taken[20], p90_us=taken[180])
elif role == "victim":
    calls, error, first_error_s, per_half_s = 0, None, None, {}
    start = time.perf_counter()
    while time.perf_counter() - start < float(sys.argv[2]):
        try:
            b = a @ a; torch.cuda.synchronize(); calls += 1
            half = int((time.perf_counter() - start) * 2)
            per_half_s[half] = per_half_s.get(half, 0) + 1
        except Exception as exc:
            error, first_error_s = f"{type(exc).__name__}: {exc}"[:300], time.perf_counter() - start
            break
    say(calls=calls, error=error, error_after_s=first_error_s, ran_s=time.perf_counter() - start,
        calls_per_half_s=[per_half_s.get(i, 0) for i in range(max(per_half_s, default=-1) + 1)])
elif role == "faulter":
    try:
        import cupy
    except ImportError:
        cupy = None
    how = "cupy write to 0x10" if cupy is not None else "device-side assert"
    if cupy is not None:  # compiled and loaded before the go
        kernel = cupy.RawKernel(r'extern "C" __global__ void bad(unsigned long long p)'
                                r'{ *(volatile int*)p = 1; }', "bad")
        kernel.compile()
    say(armed=True)
    sys.stdin.readline()
    try:
        if cupy is not None:
            kernel((1,), (1,), (cupy.uint64(16),))
            cupy.cuda.Device().synchronize()
        else:
            t = torch.zeros(4, device="cuda")
            t[torch.tensor([99], device="cuda")] = 1
            torch.cuda.synchronize()
    except Exception as exc:
        say(fault=how, error=f"{type(exc).__name__}: {exc}"[:300]); sys.exit(0)
    say(fault=how, error=None)
'''


REPLY_WAIT_S = 60.0


class Client:
    """One probe process: spawned, until it says it is ready."""

    def __init__(self, role: str, env: dict[str, str], *args: str) -> None:
        self.began = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, "-c", CLIENT, role, *args], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, bufsize=0)  # select sees every line
        self.hello = self.next()
        self.ready_ms = (time.perf_counter() - self.began) * 1e3

    def next(self, wait_s: float = REPLY_WAIT_S) -> dict[str, Any]:
        """The process's next line (a JSON object), or what went wrong."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], wait_s)
        if not ready:
            return {"error": f"no reply in {wait_s:.0f} s"}
        line = self.proc.stdout.readline().decode()
        return json.loads(line) if line.startswith("{") else {"error": self.tail()}

    def tail(self) -> str:
        if self.proc.poll() is None:
            return "no reply"
        return (self.proc.stderr.read() if self.proc.stderr else b"").decode()[-300:]

    def kill_ms(self) -> float:
        began = time.perf_counter()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        return (time.perf_counter() - began) * 1e3

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def start_exit(env: dict[str, str], neighbours: int, rounds: int) -> dict[str, Any]:
    idle = [Client("idle", env) for _ in range(neighbours)]
    try:
        ready, killed, contexts = [], [], []
        for _ in range(rounds):
            client = Client("idle", env)
            ready.append(client.ready_ms)
            contexts.append(client.hello.get("context_ms", -1.0))
            killed.append(client.kill_ms())
        return {"ready_ms": ready, "context_ms": contexts, "kill_to_reaped_ms": killed,
                "ready_p50_ms": statistics.median(ready),
                "kill_to_reaped_p50_ms": statistics.median(killed),
                "neighbours_ready": sum(1 for c in idle if c.hello.get("ready"))}
    finally:
        for c in idle:
            c.end()


def timing(env: dict[str, str], neighbours: int) -> dict[str, Any]:
    idle = [Client("idle", env) for _ in range(neighbours)]
    try:
        client = Client("timing", env)
        figures = client.next()
        client.end()
        return figures
    finally:
        for c in idle:
            c.end()


def fault(env: dict[str, str], before_s: float = 2.0, after_s: float = 4.0) -> dict[str, Any]:
    """A victim's loop of matmuls, ``before_s`` into it another process's fatal fault; the
    loop goes on ``after_s`` more. The faulting process is started and armed first, so the
    fault falls inside the victim's loop."""
    faulter = Client("faulter", env)
    armed = faulter.next()
    victim = Client("victim", env, str(before_s + after_s))
    time.sleep(before_s)
    if faulter.proc.stdin is not None:
        faulter.proc.stdin.write(b"go\n")
        faulter.proc.stdin.flush()
    faulted = faulter.next()
    faulted_at = time.perf_counter() - victim.began - victim.ready_ms / 1e3
    faulter.end()
    seen = victim.next()
    victim.end()
    after = Client("idle", env)
    started = bool(after.hello.get("ready"))
    after.end()
    return {"faulter": faulted, "faulter_armed": armed, "fault_s_into_victim_loop": faulted_at,
            "victim": seen, "new_process_starts_after": started,
            "victim_ready": bool(victim.hello.get("ready"))}


def run_all(env: dict[str, str], neighbours: int, rounds: int,
            parts: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, part in (("start_exit", lambda: start_exit(env, neighbours, rounds)),
                       ("timing", lambda: timing(env, neighbours)),
                       ("fault", lambda: fault(env))):
        if name not in parts:
            continue
        began = time.perf_counter()
        try:
            out[name] = part()
        except Exception as exc:  # noqa: BLE001 - a probe reports what failed and goes on
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
        out[name]["seconds"] = round(time.perf_counter() - began, 1)
        print(name, json.dumps(out[name])[:600], flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--neighbours", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--parts", type=lambda v: v.split(","),
                        default=["start_exit", "timing", "fault"])
    args = parser.parse_args()
    result: dict[str, Any] = {}
    base = dict(os.environ)
    print("== plain processes", flush=True)
    result["plain"] = run_all(base, args.neighbours, args.rounds, args.parts)
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        result["mps"] = {"error": "nvidia-cuda-mps-control is not on this host"}
    else:
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(base, CUDA_MPS_PIPE_DIRECTORY=f"{tmp}/pipe",
                       CUDA_MPS_LOG_DIRECTORY=f"{tmp}/log")
            for d in ("pipe", "log"):
                Path(tmp, d).mkdir()
            began = subprocess.run([control, "-d"], env=env, capture_output=True, text=True,
                                   check=False)
            print("== MPS clients", began.returncode, began.stderr[-200:], flush=True)
            args.out.write_text(json.dumps(result, indent=1))  # kept if MPS hangs
            try:
                result["mps"] = run_all(env, args.neighbours, args.rounds, args.parts)
            finally:
                subprocess.run([control], input="quit\n", env=env, capture_output=True,
                               text=True, check=False, timeout=30)
                logs = {p.name: p.read_text()[-6000:] for p in Path(tmp, "log").glob("*.log")}
                result["mps_logs"] = logs
    args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
