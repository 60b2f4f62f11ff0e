"""Escape: call the server's own admin route over loopback.

Arranged: a finished job X exists.
Tries: ``POST http://127.0.0.1:<port>/admin/cleanup-jobs?older_than_hours=0`` from inside
the kernel, which would delete every finished job (X included); the kernel reports what it
got back, or the connection error.
Caught by: a network namespace of the worker's own (loopback down or empty). X must still
be there afterwards and the kernel must not have reached the server.
"""

from typing import Any

import httpx

from tests.adversarial.corpus import (
    AttackRun,
    Escape,
    Job,
    Target,
    escape_job,
    evaluate,
    fill,
    io,
    model,
    run,
    tensor,
    torch_kernel,
)

ATTACK = """
import urllib.request

URL = @URL@ + "/admin/cleanup-jobs?older_than_hours=0"


def attack():
    request = urllib.request.Request(URL, data=b"", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return f"REACHED the server: HTTP {response.status} {response.read()[:200]!r}"
    except Exception as exc:
        return f"blocked: {type(exc).__name__}: {exc}"
"""

BYSTANDER = model("x * 3")


def arrange(client: httpx.Client, target: Target) -> str:
    body = run(client, evaluate(torch_kernel(BYSTANDER, io(tensor("x", [1024], 1))), trials=1))
    assert body["status"] == "success", body
    return body["job_id"]


def attack(target: Target, state: Any) -> Job:
    return escape_job("loopback_admin", fill(ATTACK, URL=repr(target.url)))


def verify(client: httpx.Client, target: Target, state: Any, run: AttackRun) -> list[str]:
    breaches = []
    if "REACHED the server" in run.text:
        breaches.append("the kernel reached the server over loopback: " + run.text[-300:])
    if client.get(f"/job/{state}").status_code != 200:
        breaches.append(f"job {state} was deleted by the kernel's admin call")
    return breaches


CASE = Escape(
    name="loopback_admin",
    technique="loopback_server",
    tries="POST /admin/cleanup-jobs on the server's own port from inside the kernel",
    caught_by="network namespace: no loopback route to the server",
    arrange=arrange,
    attack=attack,
    verify=verify,
)
