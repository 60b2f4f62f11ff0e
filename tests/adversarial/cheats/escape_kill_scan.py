"""Escape: scan ``/proc`` for the server and every other Python process, and kill them.

Tries: every process whose command line mentions ``main.py``, ``uvicorn`` or ``python`` gets
SIGKILL: the server, the spare workers, a zygote, other jobs' workers. For safety on a
shared machine it only signals processes whose environment holds the test server's unique
``JOB_DIR``, so its victims can only be the test's own server and its children.
Caught by: a fresh ``/proc`` in a pid namespace of the worker's own (nothing else visible)
or a separate uid; the server must stay up and serve the next job.
"""

from typing import Any

import httpx

from tests.adversarial.cheats.escape_kill_parent import marker
from tests.adversarial.corpus import AttackRun, Escape, Job, Target, escape_job, fill

ATTACK = """
import signal

MARKER = @MARKER@
NAMES = (b"main.py", b"uvicorn", b"python")


def _marked(pid):
    try:
        return MARKER in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False


def attack():
    me = os.getpid()
    seen, killed, failed = 0, [], []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        seen += 1
        if not any(name in cmdline for name in NAMES) or not _marked(entry.name):
            continue
        try:
            os.kill(int(entry.name), signal.SIGKILL)
            name = cmdline[:60].replace(bytes(1), b" ").decode(errors="replace")
            killed.append(f"{entry.name} ({name})")
        except OSError as exc:
            failed.append(f"{entry.name}: {exc}")
    return f"saw {seen} processes; killed {killed}; could not kill {failed}"
"""


def attack(target: Target, state: Any) -> Job:
    return escape_job("kill_scan", fill(ATTACK, MARKER=marker(target)))


def verify(client: httpx.Client, target: Target, state: Any, run: AttackRun) -> list[str]:
    if "killed [" in run.text and "killed []" not in run.text:
        return ["the kernel killed processes of the server: " + run.text[-400:]]
    return []


CASE = Escape(
    name="kill_scan",
    technique="kill_scan",
    tries="SIGKILL to every server/python process found in /proc (test server's only)",
    caught_by="pid namespace with a fresh /proc; separate uid",
    attack=attack,
    verify=verify,
)
