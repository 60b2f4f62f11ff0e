"""A server a test run started stops when that run is killed (as a timeout kills it), with
its workers: it does not keep its GPU memory from the runs after."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, STOP_WITH_STARTER

pytestmark = pytest.mark.e2e

STARTER = """
import sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.conftest import start_server
server = start_server(Path({state!r}), {{"SPARES_PER_GPU": "2"}})
print(server.proc.pid, flush=True)
time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone for our purpose
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not STOP_WITH_STARTER, reason="needs util-linux's setpriv")
def test_a_killed_test_run_takes_its_server_down(tmp_path: Path) -> None:
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER.format(root=str(ROOT), state=str(tmp_path))],
        stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert starter.stdout is not None
    server_pid = int(starter.stdout.readline())
    assert alive(server_pid)
    starter.send_signal(signal.SIGKILL)
    starter.wait()
    deadline = time.monotonic() + 60
    while alive(server_pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(server_pid), "the server outlived the test run that started it"
