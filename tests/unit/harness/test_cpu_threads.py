"""In CPU mode a job process's torch runs on one thread unless the server's environment sets
OMP_NUM_THREADS (harness.process.cpu_threads): a judge and a kernel's process share the CPU,
and teams of threads in both read an identical pair as 0.11x-0.57x on a two-core host."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness.process import cpu_threads
from tests.conftest import ROOT


@pytest.mark.parametrize(("value", "threads"), [(None, 1), ("3", 3), ("0", 1), ("many", 1)])
def test_cpu_threads_follow_omp_num_threads_and_default_to_one(
        value: str | None, threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    if value is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert cpu_threads() == threads


def test_a_cpu_mode_process_is_set_to_one_torch_thread() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    code = ("import torch; torch.set_num_threads(2)\n"
            "from harness.process import prepare_process\n"
            "prepare_process('cpu'); print(torch.get_num_threads())")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    assert done.stdout.strip() == "1", done.stderr
