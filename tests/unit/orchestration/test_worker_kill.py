"""Worker.kill signals the job process and its children at once: a namespace init kills the
rest only after its own teardown, so the job's process (its CUDA context) would otherwise
start dying one address-space teardown later."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestration.worker import BlockingCalls, Worker, _child_pidfds
from shared.channel import Channel

# A parent that forks a sleeping child, prints the child's pid, then sleeps: a job's init and
# its job process, without the namespace (so nothing but Worker.kill reaches the child).
TREE = """
import os, sys, time
child = os.fork()
if child == 0:
    time.sleep(60)
    os._exit(0)
print(child, flush=True)
time.sleep(60)
"""


def _state(pid: int) -> str | None:
    """The process's state letter, or None once it is reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _worker(tmp_path: Path) -> tuple[Worker, list[object]]:
    ours, theirs = socket.socketpair()
    job_ours, job_theirs = socket.socketpair()
    out_read, out_write = os.pipe()
    blocking = BlockingCalls(1)
    worker = Worker(Channel(ours), Channel(job_ours), out_read, tmp_path, blocking)
    return worker, [ours, theirs, job_ours, job_theirs, out_read, out_write, blocking]


def _release(held: list[object]) -> None:
    for thing in held:
        if isinstance(thing, int):
            os.close(thing)
        elif isinstance(thing, BlockingCalls):
            thing.close()
        else:
            thing.close()  # type: ignore[attr-defined]


@pytest.mark.skipif(not Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists(),
                    reason="this kernel does not list a process's children")
def test_kill_signals_the_job_processes_child_pidfds_as_well_as_the_job_process(
        tmp_path: Path) -> None:
    parent = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    worker, held = _worker(tmp_path)
    try:
        worker.pid = parent.pid
        worker.kill()
        parent.wait(5)
        deadline = time.monotonic() + 5
        while _state(child) not in (None, "Z") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _state(child) in (None, "Z"), "the child outlived the kill"
        assert worker.killed
    finally:
        if _state(child) not in (None, "Z"):
            os.kill(child, 9)
        parent.kill()
        parent.wait()
        _release(held)


def test_child_pidfds_names_only_live_child_pidfds_and_none_of_a_process_without_any() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    assert sleeper.stdout is not None
    child = int(sleeper.stdout.readline())
    try:
        if not Path(f"/proc/{sleeper.pid}/task/{sleeper.pid}/children").exists():
            pytest.skip("this kernel does not list a process's children")
        fds = _child_pidfds(sleeper.pid)
        assert len(fds) == 1
        for fd in fds:
            os.close(fd)
        assert _child_pidfds(child) == []  # it forked nothing
        assert _child_pidfds(2**22 + 12345) == []  # no such process
    finally:
        os.kill(child, 9)
        sleeper.kill()
        sleeper.wait()
