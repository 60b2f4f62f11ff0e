"""Why does CUPTI record nothing in the server's workers? (GPU host probe)

    python scripts/probe_cupti_fork.py

The timer's device-activity measure (CUPTI, harness.timer) returned 0.0 ms of GPU work in
the server's workers for every honest kernel of the adversarial corpus, while the same timer
in a fresh process sees the work. A worker differs from a fresh process in two ways: it is
forked from the zygote, which imported torch, cupti-python and the timer module first, and it
then enters the sandbox (namespaces, another uid). Each way is tried on its own here, each
time binding the timer in the child and timing one small kernel; printed per way: CUPTI's
busy time per call beside the event median (0.0 busy: CUPTI saw nothing).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def measure() -> str:
    import statistics

    import torch

    from harness import timer

    bound = timer.bind("cuda")
    x = torch.randn(1 << 22, device="cuda")
    out = torch.empty_like(x)
    raw = bound.run(lambda: torch.mul(x, 0.5, out=out), 5, None)
    return json.dumps({"event_median_ms": round(statistics.median(raw.event_ms), 5),
                       "device_busy_ms": raw.device_busy_ms,
                       "device_busy_error": raw.device_busy_error})


def in_fork() -> str:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            answer = measure()
        except BaseException as exc:  # noqa: BLE001
            answer = f"error: {exc}"
        os.write(write_fd, answer.encode())
        os._exit(0)
    os.close(write_fd)
    received = b""
    while chunk := os.read(read_fd, 65536):
        received += chunk
    os.waitpid(pid, 0)
    return received.decode(errors="replace")


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    if which == "all":
        import subprocess

        for way in ("fresh", "fork_after_torch", "fork_after_cupti", "sandbox_as_root",
                    "sandbox_same_uid"):
            done = subprocess.run([sys.executable, __file__, way], capture_output=True,
                                  text=True, timeout=120, check=False)
            print(f"{way:18} {done.stdout.strip()[-400:]} {done.stderr.strip()[-300:]}",
                  flush=True)
        return
    if which == "fresh":
        print(measure())
        return
    import torch  # noqa: F401 - as the zygote: imported, CUDA not initialised

    if which != "fork_after_torch":
        import cupti.cupti  # noqa: F401

        import harness.timer  # noqa: F401
    if which.startswith("fork"):
        print(in_fork())
        return
    from worker_host import sandbox

    with tempfile.TemporaryDirectory() as scratch:
        os.chmod(scratch, 0o777)
        spec = sandbox.SandboxSpec(scratch=scratch)
        print(sandbox.run_in_sandbox(spec, which == "sandbox_as_root" and os.geteuid() == 0,
                                     measure))


if __name__ == "__main__":
    main()
