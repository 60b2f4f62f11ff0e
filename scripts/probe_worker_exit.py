"""How long a ready worker takes to be gone after the server kills it, through the real pool
(zygote, sandbox, the job process's CUDA context where there is a GPU), by how it is killed:

- ``init``: SIGKILL to the namespace's init alone (the server before 7aa451a): the kernel tears
  the init's address space down before it kills the job's process;
- ``together``: ``Worker.kill``, which signals the init's children at the same moment.

    python scripts/probe_worker_exit.py [--device cpu|cuda] [--kills 12] [--env KEY=VALUE]
                                        [--idle N] [--trace] [--out FILE]

Milliseconds from the signal until the pool hears that the job's namespace is empty (what a
timing's ``server.settle`` waits for), the two ways alternating; prints one JSON document.
With ``--trace``, a thread watches ``/proc`` meanwhile and says, per kill, when the job's
process was down to its last thread, a zombie, and reaped, and when the namespace's init was a
zombie and reaped: which link of the chain (job process, init, sandbox's outer process, the
server's reader) the time is spent in.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from probe_common import emit, idle_contexts

from orchestration.gpu_gate import children
from orchestration.worker import Worker
from orchestration.worker_pool import PoolKey, WorkerPool
from shared.settings import Settings


def kill_init_only(worker: Worker) -> None:
    assert worker.pid is not None
    worker.killed = True
    os.kill(worker.pid, signal.SIGKILL)


def state(pid: int) -> tuple[str, int]:
    """(state letter, live threads) of ``pid``; ("gone", 0) once reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[17])
    except (OSError, IndexError, ValueError):
        return "gone", 0


class Trace:
    """Watches the init and the job process from the kill on, every ~0.2 ms, in a thread."""

    def __init__(self, init: int) -> None:
        kids = children(init)
        self.pids = {"init": init, **({"job": kids[0]} if kids else {})}
        self.first: dict[str, float] = {}
        self.queues = "?"
        with contextlib.suppress(OSError, KeyError):
            with open(f"/proc/{self.pids.get('job', init)}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            self.queues = env.get(b"CUDA_DEVICE_MAX_CONNECTIONS", b"unset").decode()
        self.began = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.began = time.monotonic()
        self._thread.start()

    def _mark(self, what: str) -> None:
        if what not in self.first:
            self.first[what] = round((time.monotonic() - self.began) * 1e3, 2)

    def _run(self) -> None:
        while not self._stop.is_set():
            for name, pid in self.pids.items():
                letter, threads = state(pid)
                if letter == "gone":
                    self._mark(f"{name} reaped")
                    continue
                if threads <= 1:
                    self._mark(f"{name} one thread left")
                if letter in ("Z", "X"):
                    self._mark(f"{name} zombie")
            time.sleep(0.0002)

    def stop(self) -> dict[str, object]:
        self._stop.set()
        self._thread.join()
        order: list[tuple[str, float]] = sorted(self.first.items(), key=lambda kv: kv[1])
        return {"queues": self.queues, **dict(order)}


async def probe(device: str, kills: int, env: dict[str, str],
                trace: bool = False) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        pool = WorkerPool(Settings.from_env({"JOB_DIR": tmp, "SPARE_WORKERS": "false", **env}),
                          device)
        key = PoolKey(0 if device == "cuda" else None)
        gone: dict[str, list[float]] = {"init": [], "together": []}
        traces: list[dict[str, object]] = []
        try:
            for i in range(2 * kills):
                way = "init" if i % 2 == 0 else "together"
                worker = await pool.spawn(key)
                await asyncio.sleep(0.2)  # its start's last work done
                watch = Trace(worker.pid) if trace and worker.pid is not None else None
                if watch is not None:
                    watch.start()
                began = time.monotonic()
                kill_init_only(worker) if way == "init" else worker.kill()
                await worker.exit_status(30)
                gone[way].append(round((time.monotonic() - began) * 1e3, 2))
                if watch is not None:
                    traces.append({"way": way, "heard": gone[way][-1],
                                   **watch.stop()})
                pool.release(worker)
        finally:
            await pool.close()
    return {"device": device, "isolation": pool.isolation, "settings": env,
            "p50_ms": {way: statistics.median(v) for way, v in gone.items()},
            "ms": gone, **({"traces": traces} if trace else {})}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="default: cuda where torch sees a GPU")
    parser.add_argument("--kills", type=int, default=12, help="kills each way")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="a server setting for the pool (SANDBOX=off, SPARE_WARM=none)")
    parser.add_argument("--trace", action="store_true",
                        help="say when each process of the chain went (see above)")
    parser.add_argument("--idle", type=int, default=0,
                        help="idle CUDA contexts beside the pool's worker (a server's spares)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    device = args.device
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    env = dict(item.split("=", 1) for item in args.env)
    with idle_contexts(args.idle, {**os.environ, "CUDA_DEVICE_MAX_CONNECTIONS": "1"}):
        result = asyncio.run(probe(device, args.kills, env, args.trace))
    emit({**result, "idle_contexts": args.idle}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
