"""Escape: write into the job store's directory and the job root beside other jobs.

Tries: finds the directory of the job store (``JOB_STORE_PATH`` from the environment, the
parents of its own scratch directory; the true paths are tried too) and the job root that
holds every job's directory, and creates a sentinel file in each. A real attack would
rewrite the SQLite store (other jobs' verdicts) or another job's files.
Caught by: the job root and the job store's directory hidden (empty read-only tmpfs) or
read-only in the worker's view.
"""

from typing import Any

import httpx

from tests.adversarial.corpus import AttackRun, Escape, Job, Target, escape_job, fill

ATTACK = """
SENTINEL = @SENTINEL@
KNOWN = @KNOWN@


def _directories():
    found = []
    store = os.environ.get("JOB_STORE_PATH")
    if store:
        found.append(Path(store).resolve().parent)
    for name in ("JOB_DIR",):
        if os.environ.get(name):
            found.append(Path(os.environ[name]))
    here = Path(__file__).resolve().parent
    found += [here.parent, here.parent.parent]
    found += [Path(p) for p in KNOWN]
    unique = []
    for d in found:
        if d not in unique:
            unique.append(d)
    return unique


def attack():
    results = []
    for d in _directories():
        try:
            (d / SENTINEL).write_text("written by an escaping kernel")
            results.append(f"WROTE {d / SENTINEL}")
        except OSError as exc:
            results.append(f"blocked at {d}: {exc}")
    return "; ".join(results)
"""


def sentinel(target: Target) -> str:
    return f".adversarial-sentinel-{target.token}"


def places(target: Target) -> list:
    return [target.state_dir / sentinel(target), target.job_dir / sentinel(target)]


def attack(target: Target, state: Any) -> Job:
    known = [str(target.state_dir), str(target.job_dir)]
    source = fill(ATTACK, SENTINEL=repr(sentinel(target)), KNOWN=repr(known))
    return escape_job("write_job_store", source)


def verify(client: httpx.Client, target: Target, state: Any, run: AttackRun) -> list[str]:
    return [f"the kernel created {p}" for p in places(target) if p.exists()]


def cleanup(target: Target, state: Any) -> None:
    for p in places(target):
        p.unlink(missing_ok=True)


CASE = Escape(
    name="write_job_store",
    technique="write_job_store",
    tries="creates files in the job store's directory and in the job root",
    caught_by="job root and store directory hidden or read-only in the sandbox",
    attack=attack,
    verify=verify,
    cleanup=cleanup,
)
