"""Every cheat in the corpus is caught, and every escape is contained (issue 7).

A cheat is caught when its job does not pass (not compiled, not correct, not a success), or
its ``integrity`` block says ``suspicious``, or (timing cheats) the median it reports is at
least half the median of its honest twin, measured in the same test: a cheat whose number
comes out honest did not win. A cheat that states what must become of it (``Cheat.expect``:
it fails, it is flagged, or its published speedup and runtime stay within the residual of its
honest twin's, ``outcomes.py``) is held to exactly that, and to its own check of the answer.
A known win is expected to fail (xfail) with its figures as the reason.

An escape is contained when, after the attempt, the server still answers ``/health`` and
serves the next job, and the attack's own target is untouched (no sentinel file, no secret
in the answer, no connection received, no job deleted). Escape tests run only where the
server says its workers are isolated: they are skipped, with the reason, where ``/health``
reports ``isolation: "none"`` (set ``KES_ADVERSARIAL_FORCE_ESCAPES=1`` to attack an
unisolated server anyway; every attack is aimed only at the test's own server).
"""

from __future__ import annotations

import os
import time
from typing import Any

import httpx
import pytest

from tests.adversarial import outcomes
from tests.adversarial.catalogue import CHEATS, CPU_TECHNIQUES, ESCAPES, TECHNIQUES, module_of
from tests.adversarial.conftest import RunningServer
from tests.adversarial.corpus import (
    ESCAPE_REPORT,
    SIZES,
    AttackRun,
    Cheat,
    Escape,
    Expect,
    Family,
    Job,
    Target,
    evaluate,
    exec_result,
    io,
    median_ms,
    passed,
    run,
    summary,
    suspicious,
    tensor,
    torch_kernel,
)

pytestmark = [pytest.mark.e2e, pytest.mark.adversarial]

HONEST_FRACTION = 0.5  # a timing cheat reporting at least this share of the honest median lost
# at most, where a cheat with a stated expectation seems to have won: more on the CPU, where
# a shared host's speed moves a reading by more than the residual from one minute to the next
TWIN_READINGS = {"gpu": 3, "cpu": 5}
FORCE_ESCAPES_ENV = "KES_ADVERSARIAL_FORCE_ESCAPES"
ALIVE_DEADLINE_S = 10.0


def params(cases: tuple[Any, ...]) -> list[Any]:
    return [pytest.param(c, id=c.name, marks=marks(c)) for c in cases]


def marks(case: Any) -> list[Any]:
    found = [pytest.mark.gpu] if case.gpu else []
    win = getattr(case, "known_win", None)
    if win is not None and not win.by_chance:
        found.append(pytest.mark.xfail(strict=True, reason=f"known win: {win.reason}"))
    return found


STATED = tuple(c for c in CHEATS if c.expect)  # each with what must become of it
CAUGHT = tuple(c for c in CHEATS if not c.expect)  # held to the rule of caught()


# ---- cheats ---------------------------------------------------------------------------------


def caught(body: dict[str, Any], honest_median: float | None,
           fraction: float = HONEST_FRACTION) -> str | None:
    """How the cheat was caught, or None if it got through."""
    result = exec_result(body)
    if not passed(body):
        return f"verdict {body.get('status')}/{result.get('outcome')}"
    if suspicious(body):
        return f"flagged suspicious: {result['integrity'].get('reasons')}"
    median = median_ms(body)
    if honest_median and median is not None and median >= fraction * honest_median:
        return f"honest number: median {median:.4g} ms vs honest {honest_median:.4g} ms"
    return None


@pytest.mark.parametrize("case", params(CAUGHT))
def test_cheat_is_caught(case: Cheat, adversarial_server: RunningServer) -> None:
    target = adversarial_server.target()
    client = adversarial_server.client
    honest_median = None
    twins: list[dict[str, Any]] = []
    if case.honest is not None:
        twins.append(honest_reading(case, target, adversarial_server))
        assert passed(twins[0]) and not suspicious(twins[0]), (
            f"the honest twin of {case.name} must pass unflagged, or the comparison means "
            f"nothing: {summary(twins[0])}"
        )
        honest_median = median_ms(twins[0])
        assert honest_median, summary(twins[0])
    adversarial_server.settle()
    body = run(client, case.build(target))
    if caught(body, honest_median, case.honest_fraction) is None and honest_median:
        # A busy host only ever slows a reading, and a slow honest twin makes any cheat look
        # fast (on a 2-core CI host the twin once read 41.8 ms against its usual ~20): the
        # twin is measured once more, and the faster of its two readings is the honest cost.
        adversarial_server.settle()
        twins.append(run(client, case.honest(target)))
        again = twins[-1]
        if passed(again) and not suspicious(again) and median_ms(again):
            honest_median = min(honest_median, median_ms(again))
    how = caught(body, honest_median, case.honest_fraction)
    outcomes.record_row(case, target.gpu, None, (), outcomes.judge(body, twins, target.gpu),
                        None, how is not None, False)
    assert how, (
        f"cheat {case.name!r} got through. Attempt: {case.tries}. Must be caught by: "
        f"{case.caught_by}. Answer: {summary(body)}; honest twin's median: {honest_median}"
    )


@pytest.mark.parametrize("case", params(STATED))
def test_cheat_fails_is_flagged_or_stays_within_the_residual(
        case: Cheat, adversarial_server: RunningServer) -> None:
    target = adversarial_server.target()
    client = adversarial_server.client
    expected = case.expected(target)
    assert case.honest is not None, f"{case.name} states no honest twin to be bounded by"
    twins = [honest_reading(case, target, adversarial_server)]
    assert passed(twins[0]) and not suspicious(twins[0]), (
        f"the honest twin of {case.name} must pass unflagged, or the comparison means "
        f"nothing: {summary(twins[0])}")
    adversarial_server.settle()
    body = run(client, case.build(target))
    judged = outcomes.judge(body, twins, target.gpu)
    if not target.gpu and judged.outcome not in {e.value for e in expected} and \
            slowed_by_the_host(body):
        # a shared host that slowed through the reading flags it as slowing: no win, and
        # nothing the cheat's mechanism shows; read once more, judged as any reading is
        adversarial_server.settle()
        body = run(client, case.build(target))
        judged = outcomes.judge(body, twins, target.gpu)
    while judged.outcome == outcomes.WON and \
            len(twins) < TWIN_READINGS["gpu" if target.gpu else "cpu"]:
        # a busy host only ever slows a reading: the twin again, its best reading kept
        adversarial_server.settle()
        twins.append(run(client, case.honest(target)))
        judged = outcomes.judge(body, twins, target.gpu)
    if not target.gpu and judged.outcome == outcomes.WON:
        # on the CPU each pairing measures its own hand-over's cost, which with the shared
        # host's speed moves a reading by more than the residual: a win must show again in a
        # second reading of the cheat (a cheat's mechanism wins every time, the host's noise
        # does not repeat on demand); the GPU's one reading stands
        adversarial_server.settle()
        again = run(client, case.build(target))
        judged_again = outcomes.judge(again, twins, target.gpu)
        if judged_again.outcome != outcomes.WON:
            body, judged = again, judged_again
    fastest = min(twins, key=lambda b: median_ms(b) or float("inf"))
    problem = case.check(body, fastest) if case.check is not None else None
    met = judged.outcome in {e.value for e in expected} and problem is None
    win = case.known_win
    # a win by chance excuses the outcome only: never a check of the answer that failed
    seen = not met and win is not None and (
        win.shows is None or (problem is None and win.shows(body, fastest)))
    outcomes.record_row(case, target.gpu, case.size.n(target) if case.size else None,
                        expected, judged, problem, met, seen)
    if seen and win is not None and win.shows is not None:
        pytest.xfail(f"known win by chance, seen here ({judged.detail}; {problem}): "
                     f"{win.reason}")
    assert judged.outcome in {e.value for e in expected}, (
        f"cheat {case.name!r} must end {' or '.join(e.value for e in expected)}, and "
        f"{'won' if judged.outcome == outcomes.WON else 'ended ' + judged.outcome}: "
        f"{judged.detail}. Attempt: {case.tries}. Must be stopped by: {case.caught_by}. "
        f"Answer: {summary(body)}; honest twin: {summary(fastest)}")
    assert problem is None, f"cheat {case.name!r}: {problem}"


def honest_reading(case: Cheat, target: Target, server: RunningServer) -> dict[str, Any]:
    """The honest twin's answer; on the CPU read once more where the shared host slowed
    through the reading (flagged as slowing and for nothing else: its calls are the honest
    kernel's, which do not grow)."""
    assert case.honest is not None
    server.settle()
    body = run(server.client, case.honest(target))
    if not target.gpu and slowed_by_the_host(body):
        server.settle()
        body = run(server.client, case.honest(target))
    return body


def slowed_by_the_host(body: dict[str, Any]) -> bool:
    """Whether the answer is flagged for nothing but its samples rising through the reading
    (profiling.integrity: a timing cut short as slowing)."""
    block = exec_result(body).get("integrity") or {}
    reasons = block.get("reasons") or []
    return bool(block.get("suspicious")) and bool(reasons) and all(
        "each call ran slower than the last" in str(r) for r in reasons)


# ---- escapes --------------------------------------------------------------------------------


def isolation_missing(health: dict[str, Any]) -> str | None:
    """Why escape tests cannot run against this server, or None if they can."""
    if os.environ.get(FORCE_ESCAPES_ENV) == "1":
        return None
    mode = health.get("isolation")
    if mode is None:  # a server from before issue 7 does not say: attack it anyway
        return None
    if str(mode).strip().lower() in ("", "none", "off", "disabled"):
        return (
            f"the server runs workers without isolation (isolation={mode!r}"
            f"{': ' + health['isolation_detail'] if health.get('isolation_detail') else ''}); "
            f"escape tests need the worker sandbox (bubblewrap / namespaces). "
            f"Set {FORCE_ESCAPES_ENV}=1 to attack an unisolated server anyway."
        )
    return None


def attempt(client: httpx.Client, job: Job) -> AttackRun:
    try:
        r = client.post(job.route, json=job.body)
    except httpx.TransportError as exc:
        return AttackRun(transport_error=f"{type(exc).__name__}: {exc}")
    return AttackRun(status_code=r.status_code, text=r.text)


def server_breaches(running: RunningServer) -> list[str]:
    """Empty if the server answers /health and serves a job after the attack."""
    deadline = time.monotonic() + ALIVE_DEADLINE_S
    last = ""
    while True:
        try:
            r = running.client.get("/health", timeout=5)
            if r.status_code == 200:
                break
            last = f"HTTP {r.status_code}"
        except httpx.TransportError as exc:
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() > deadline:
            code = running.server.proc.poll()
            return [f"the server no longer answers /health ({last}; process exit code {code})"]
        time.sleep(0.2)
    source = "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x - 1\n"
    try:
        job = evaluate(torch_kernel(source, io(tensor("x", [64], 1))), trials=1)
        body = run(running.client, job)
    except (httpx.TransportError, AssertionError) as exc:
        return [f"the server answers /health but did not serve the next job: {exc}"]
    if not passed(body):
        return [f"the next job after the attack failed: {summary(body)}"]
    return []


def attack_ran(case: Escape, outcome: AttackRun) -> bool:
    """The attack's code demonstrably ran (its report came back, or it took its worker down)."""
    if outcome.transport_error is not None:
        return True  # the server went down during the attack
    text = outcome.text
    markers = (f"{ESCAPE_REPORT} {case.name}", "killed by signal", "exited with code")
    return any(marker in text for marker in markers)


@pytest.mark.parametrize("case", params(ESCAPES))
def test_escape_is_contained(case: Escape, fresh_server: Any) -> None:
    running: RunningServer = fresh_server()
    reason = isolation_missing(running.client.get("/health").json())
    if reason:
        pytest.skip(reason)
    target = running.target()
    state = None
    try:
        state = case.arrange(running.client, target)
        outcome = attempt(running.client, case.attack(target, state))
        breaches = server_breaches(running)
        assert attack_ran(case, outcome), (
            f"the {case.name} attack did not run, so this test shows nothing: "
            f"HTTP {outcome.status_code} {outcome.text[-2000:]}"
        )
        try:
            breaches += case.verify(running.client, target, state, outcome)
        except httpx.TransportError as exc:
            breaches.append(f"could not check the attack's target, the server is gone: {exc}")
        assert not breaches, (
            f"escape {case.name!r} got out. Attempt: {case.tries}. Must be stopped by: "
            f"{case.caught_by}. Breaches: {breaches}. "
            f"Attack answer: {outcome.transport_error or outcome.text[-1500:]}"
        )
    finally:
        case.cleanup(target, state)


# ---- the catalogue --------------------------------------------------------------------------


def dummy_target(gpu: bool) -> Target:
    from pathlib import Path

    return Target(gpu=gpu, url="http://127.0.0.1:9", state_dir=Path("/nonexistent/state"),
                  job_dir=Path("/nonexistent/state/jobs"), token="0" * 32)


def test_catalogue_spans_every_cheat_family() -> None:
    cases: list[Cheat | Escape] = [*CHEATS, *ESCAPES]
    assert len(cases) >= 25
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "case names must be unique"
    for family, techniques in TECHNIQUES.items():
        for technique in techniques:
            assert any(c.family == family and c.technique == technique for c in cases), (
                f"no {family.value} cheat for {technique}"
            )
    for c in cases:
        assert c.technique in TECHNIQUES[c.family], f"{c.name}: unknown technique {c.technique}"
    for technique in CPU_TECHNIQUES:
        assert any(c.technique == technique and not c.gpu for c in cases), (
            f"no CPU-mode case for {technique}"
        )
    assert all(c.family == Family.ESCAPE for c in ESCAPES)
    assert all(c.family in (Family.TIMING, Family.VERDICT) for c in CHEATS)
    # every timing cheat is measured against the same work done honestly
    assert all(c.honest is not None for c in CHEATS if c.family == Family.TIMING)
    # side streams include one created in C++ through load_inline
    assert any(
        c.technique == "side_stream"
        and c.build(dummy_target(True)).body["custom_kernel"]["kernel_type"] == "torch_cuda"
        and "cudaStreamCreate" in c.build(dummy_target(True)).body["custom_kernel"]["source_code"]
        for c in CHEATS
    )


SIZED_TECHNIQUES = ("figures_rewritten", "message_arrival", "input_arrival", "median_mean_split",
                    "forged_extra_figures", "readings_again")


def test_each_sized_family_is_tried_at_every_size_with_its_expectation() -> None:
    for technique in SIZED_TECHNIQUES:
        cases = [c for c in CHEATS if c.technique == technique]
        assert cases, f"no cheat for {technique}"
        assert all(c.expect and c.honest is not None for c in cases), (
            f"every {technique} cheat states its expectation against an honest twin")
        assert {c.size for c in cases} == set(SIZES), f"{technique} misses a size"
        assert len({c.name.removesuffix(f"_{c.size.label}") for c in cases if c.size}) >= 2 \
            or technique == "message_arrival", f"{technique} has a single variant"
        assert any(not c.gpu for c in cases), f"{technique} has no CPU-mode case"
    stated = [c for c in CHEATS if c.expect]
    for expect in Expect:
        assert any(expect in c.expect or expect in (c.cpu_expect or ()) for c in stated), expect
    # a bounded cheat on the CPU is a compute-bound size: the residual there cannot hold a
    # copy-bound call (docs/ENGINE.md)
    assert all(c.size is not None and c.size.cpu_n is not None
               for c in stated if not c.gpu and Expect.BOUNDED in c.expected(dummy_target(False)))
    # a known win states its figures, and a stated case lives in a module that says how
    assert all(len(c.known_win.reason) > 80 for c in stated if c.known_win)


ALL_CASES: tuple[Cheat | Escape, ...] = (*CHEATS, *ESCAPES)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in ALL_CASES])
def test_cheat_module_says_what_it_tries_and_what_catches_it(case: Cheat | Escape) -> None:
    module = module_of(case)
    assert module.__doc__, case.name
    assert "Tries:" in module.__doc__ and "Caught by:" in module.__doc__, module.__name__


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu-sizes", "gpu-sizes"])
def test_every_cheat_request_is_a_valid_api_request(gpu: bool) -> None:
    from kernel_eval_client.models import CompareRequest, EvaluationRequest

    target = dummy_target(gpu)
    jobs = [c.build(target) for c in CHEATS] + [c.honest(target) for c in CHEATS if c.honest]
    jobs += [c.attack(target, None) for c in ESCAPES if c.name in ("kill_parent", "kill_scan",
                                                                     "write_project_tree",
                                                                     "write_job_store")]
    for job in jobs:
        model = CompareRequest if job.route == "/compare" else EvaluationRequest
        model.model_validate(job.body)
        kernels = (job.body.get(key) for key in ("kernel", "custom_kernel", "ref_kernel"))
        for k in kernels:
            if k is not None and k["kernel_type"] != "cuda":  # Python sources
                compile(k["source_code"], "<kernel>", "exec")
