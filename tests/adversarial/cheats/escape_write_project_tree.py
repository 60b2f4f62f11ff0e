"""Escape: write into the server's source tree.

Tries: finds the project root the way an attacker would (``__file__`` of the server's
modules in ``sys.modules``, and the working directory, walked up to the directory holding
``main.py`` and ``pyproject.toml``; the true root is tried too) and creates a sentinel file
there. A real attack would rewrite ``app.py`` or the validation code for every later job.
Caught by: a read-only view of everything outside the job's own scratch directory.
"""

from typing import Any

import httpx

from tests.adversarial.corpus import AttackRun, Escape, Job, Target, escape_job, fill

ATTACK = """
SENTINEL = @SENTINEL@
KNOWN_ROOT = @ROOT@
SERVER_MODULES = ("subprocess_worker", "compilation", "validation", "profiling",
                  "orchestration", "shared", "io_contract", "app", "main")


def _roots():
    starts = [Path.cwd()]
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and name.split(".")[0] in SERVER_MODULES:
            starts.append(Path(path).resolve().parent)
    roots = []
    for start in starts:
        for d in (start, *start.parents):
            if (d / "main.py").exists() and (d / "pyproject.toml").exists() and d not in roots:
                roots.append(d)
    if Path(KNOWN_ROOT) not in roots:
        roots.append(Path(KNOWN_ROOT))
    return roots


def attack():
    results = []
    for root in _roots():
        try:
            (root / SENTINEL).write_text("written by an escaping kernel")
            results.append(f"WROTE {root / SENTINEL}")
        except OSError as exc:
            results.append(f"blocked at {root}: {exc}")
    return "; ".join(results)
"""


def sentinel(target: Target) -> str:
    return f".adversarial-sentinel-{target.token}"


def attack(target: Target, state: Any) -> Job:
    source = fill(ATTACK, SENTINEL=repr(sentinel(target)), ROOT=repr(str(target.project_root)))
    return escape_job("write_project_tree", source)


def verify(client: httpx.Client, target: Target, state: Any, run: AttackRun) -> list[str]:
    path = target.project_root / sentinel(target)
    return [f"the kernel created {path}"] if path.exists() else []


def cleanup(target: Target, state: Any) -> None:
    (target.project_root / sentinel(target)).unlink(missing_ok=True)


CASE = Escape(
    name="write_project_tree",
    technique="write_project_tree",
    tries="creates a file in the project root found from sys.modules/cwd",
    caught_by="read-only file system outside the job's scratch directory",
    attack=attack,
    verify=verify,
    cleanup=cleanup,
)
