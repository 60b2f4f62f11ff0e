"""How long a ready worker takes to be gone after the server kills it, through the real pool
(zygote, sandbox, the job process's CUDA context where there is a GPU), by how it is killed:

- ``init``: SIGKILL to the namespace's init alone (the server before 7aa451a): the kernel tears
  the init's address space down before it kills the job's process;
- ``together``: ``Worker.kill``, which signals the init's children at the same moment.

    python scripts/probe_worker_exit.py [--device cpu|cuda] [--kills 12] [--env KEY=VALUE]
                                        [--out FILE]

Milliseconds from the signal until the pool hears that the job's namespace is empty (what a
timing's ``server.settle`` waits for), the two ways alternating; prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestration.worker import Worker
from orchestration.worker_pool import PoolKey, WorkerPool
from shared.settings import Settings


def kill_init_only(worker: Worker) -> None:
    assert worker.pid is not None
    worker.killed = True
    os.kill(worker.pid, signal.SIGKILL)


async def probe(device: str, kills: int, env: dict[str, str]) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        pool = WorkerPool(Settings.from_env({"JOB_DIR": tmp, "SPARE_WORKERS": "false", **env}),
                          device)
        key = PoolKey(0 if device == "cuda" else None)
        gone: dict[str, list[float]] = {"init": [], "together": []}
        try:
            for i in range(2 * kills):
                way = "init" if i % 2 == 0 else "together"
                worker = await pool.spawn(key)
                await asyncio.sleep(0.2)  # its start's last work done
                began = time.monotonic()
                kill_init_only(worker) if way == "init" else worker.kill()
                await worker.exit_status(30)
                gone[way].append(round((time.monotonic() - began) * 1e3, 2))
                pool.release(worker)
        finally:
            await pool.close()
    return {"device": device, "isolation": pool.isolation, "settings": env,
            "p50_ms": {way: statistics.median(v) for way, v in gone.items()},
            "ms": gone}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="default: cuda where torch sees a GPU")
    parser.add_argument("--kills", type=int, default=12, help="kills each way")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="a server setting for the pool (SANDBOX=off, SPARE_WARM=none)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    device = args.device
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    env = dict(item.split("=", 1) for item in args.env)
    result = asyncio.run(probe(device, args.kills, env))
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
