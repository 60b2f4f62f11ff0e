"""Escape: kill the worker's parent (the server, in a worker that is its direct child).

Tries: ``os.kill(os.getppid(), SIGKILL)``. For safety on a shared machine the kernel only
signals its parent when that process's environment holds the test server's unique
``JOB_DIR``, so the only process it can ever reach is the test's own server.
Caught by: a worker in its own pid namespace (its parent invisible, or an init that ignores
the signal) or under another uid; the server must stay up and serve the next job.
"""

from typing import Any

import httpx

from tests.adversarial.corpus import AttackRun, Escape, Job, Target, escape_job, fill

ATTACK = """
import signal

MARKER = @MARKER@


def _marked(pid):
    try:
        return MARKER in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False


def attack():
    ppid = os.getppid()
    if not _marked(ppid):
        return f"parent {ppid} is hidden or not the test server; nothing sent"
    try:
        os.kill(ppid, signal.SIGKILL)
    except OSError as exc:
        return f"kill({ppid}, SIGKILL) failed: {exc}"
    return f"sent SIGKILL to parent {ppid}"
"""


def marker(target: Target) -> str:
    """The bytes that pick out the test server's processes by their environment."""
    return repr(f"JOB_DIR={target.job_dir}\0".encode())


def attack(target: Target, state: Any) -> Job:
    return escape_job("kill_parent", fill(ATTACK, MARKER=marker(target)))


def verify(client: httpx.Client, target: Target, state: Any, run: AttackRun) -> list[str]:
    return []  # the generic checks (server up, next job served) are the whole point


CASE = Escape(
    name="kill_parent",
    technique="kill_parent",
    tries="os.kill(os.getppid(), SIGKILL), aimed only at the test server",
    caught_by="pid namespace / separate uid: no signals reach the server",
    attack=attack,
    verify=verify,
)
