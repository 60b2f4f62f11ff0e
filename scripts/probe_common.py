"""What the exit probes share: idle CUDA contexts beside the process under test (a server's
spares), and their one JSON document printed and written."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

IDLE = ("import sys, time, torch\ntorch.zeros(1, device='cuda'); torch.cuda.synchronize()\n"
        "sys.stdout.write('ready\\n'); sys.stdout.flush(); time.sleep(600)\n")


@contextlib.contextmanager
def idle_contexts(count: int, env: dict[str, str]) -> Iterator[None]:
    """``count`` processes that each made a CUDA context and sleep, until the block ends."""
    idle = [subprocess.Popen([sys.executable, "-c", IDLE], stdout=subprocess.PIPE, text=True,
                             env=env) for _ in range(count)]
    try:
        for proc in idle:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError("an idle context did not start")
        yield
    finally:
        for proc in idle:
            proc.kill()
            proc.wait()


def emit(result: dict[str, object], out: Path | None) -> None:
    """Print ``result`` as JSON, and write it to ``out``."""
    text = json.dumps(result, indent=1)
    print(text)
    if out:
        out.write_text(text + "\n")
