"""Fork storm: how often a forked worker's first multi-threaded torch.tanh is wrong.

oneMKL (in torch's wheels) picks a vector-math function's code path on its first call; when
several intra-op threads make that first call at once, one thread's chunk can come out of the
low-accuracy path (pytorch/pytorch#188792). Each child here makes its first tanh on 1M floats
with THREADS threads and compares it with a second call. With ``--parent-warm`` the parent
first calls ``harness.process.warm_cpu_math()``, as the zygote does before it forks.

    python scripts/probe_vml_fork_race.py [--forks 2000] [--threads 8] [--parent-warm]

On a 2-core host, 2026-11-22: without the warm-up 6 of 6000 first calls were wrong (whole
per-thread chunks, up to 9e-5 off); with it 0 of 4000.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--forks", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--parent-warm", action="store_true")
    args = parser.parse_args()
    if args.parent_warm:
        from harness import process as harness_process

        harness_process.warm_cpu_math()
    bad = 0
    for _ in range(args.forks):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            torch.set_num_threads(args.threads)
            z = torch.linspace(-8.5, 8.5, 1 << 20)
            first, second = torch.tanh(z), torch.tanh(z)
            os.write(w, str(int((first != second).sum())).encode())
            os._exit(0)
        os.close(w)
        wrong = int(os.read(r, 64) or b"0")
        os.close(r)
        os.waitpid(pid, 0)
        bad += wrong > 0
    print(f"{bad} of {args.forks} first calls wrong (threads={args.threads}, "
          f"parent warm-up={args.parent_warm})")


if __name__ == "__main__":
    main()
