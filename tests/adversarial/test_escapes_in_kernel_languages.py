"""The corpus's sandbox escapes, run from inside a kernel-language process: each attack's
source first compiles and launches its language's example kernel (CuTe DSL, TileLang, Helion,
cuTile: client/examples/dsl_kernels/), so the language's runtime, JIT and caches are live in
the process, then attacks as in test_cheats.py. GPU only: the languages run nowhere else; a
language /health says does not run here is left out, with its reason in the skip."""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

import httpx
import pytest

from tests.adversarial.catalogue import ESCAPES
from tests.adversarial.corpus import Escape, Job
from tests.adversarial.test_cheats import (
    attack_ran,
    attempt,
    isolation_missing,
    server_breaches,
)
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "client" / "examples"))
from dsl_kernels import cute_dsl_add, cutile_add, helion_add, tilelang_add

pytestmark = [pytest.mark.e2e, pytest.mark.adversarial, pytest.mark.gpu]

EXAMPLES: dict[str, ModuleType] = {"cute_dsl": cute_dsl_add, "tilelang": tilelang_add,
                                   "helion": helion_add, "cutile": cutile_add}
ATTACK_CALL = "        report = attack()\n"


def in_language(job: Job, example: ModuleType) -> Job:
    """``job``'s escape, preceded by a launch of ``example``'s kernel in the same process."""
    kernel = dict(job.body["kernel"])
    source = kernel["source_code"]
    assert ATTACK_CALL in source, "the escape template changed: update this test"
    prelude = example.CORRECT.replace("class ModelNew(", "class _LanguageKernel(")
    source = source.replace(
        ATTACK_CALL, "        _LanguageKernel()(x, x)\n        torch.cuda.synchronize()\n"
        + ATTACK_CALL)
    kernel["source_code"] = prelude + "\n" + source
    return Job(job.route, {**job.body, "kernel": kernel})


def available(client: httpx.Client) -> list[str]:
    listed = client.get("/health").json()["languages"]
    names = [item["name"] for item in listed if item["available"]]
    if not names:
        pytest.skip("no kernel language runs on this server: "
                    + "; ".join(f"{i['name']}: {i['reason']}" for i in listed))
    return names


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in ESCAPES])
def test_an_escape_from_a_kernel_language_process_is_contained(
        case: Escape, fresh_server: Any) -> None:
    running = fresh_server()
    reason = isolation_missing(running.client.get("/health").json())
    if reason:
        pytest.skip(reason)
    failures = []
    for language in available(running.client):
        target = running.target()
        state = None
        try:
            state = case.arrange(running.client, target)
            outcome = attempt(running.client, in_language(case.attack(target, state),
                                                          EXAMPLES[language]))
            assert attack_ran(case, outcome), (
                f"the {case.name} attack did not run from {language}, so this shows nothing: "
                f"HTTP {outcome.status_code} {outcome.text[-2000:]}")
            breaches = server_breaches(running) + case.verify(running.client, target, state,
                                                              outcome)
            if breaches:
                failures.append(f"{language}: {breaches}")
        finally:
            case.cleanup(target, state)
    assert not failures, f"escape {case.name!r} got out of a kernel-language process: {failures}"
