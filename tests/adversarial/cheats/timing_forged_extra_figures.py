"""Timing: forge the figures the kernel's process reports about itself at the end of a reading.

Tries: after the judge's samples the kernel's process answers ``Extras`` with its own
figures (back-to-back, CUDA graph), and the reading began with its answer to ``WarmUp`` (how
many warm-up calls, how long). The kernel replaces those handlers in
``KernelSession.HANDLERS`` so the answers carry forged figures, each a value no measurement
would give (so the test can find them wherever they land):

- ``extras``: a back-to-back figure, a CUDA-graph figure, a device-busy figure, host
  intervals and event samples of 0.000123 ms, a forged reason string beside;
- ``warm_up``: 424242 warm-up calls in 1234.5 ms.

Caught by: every figure a user ranks by (``runtime``, ``runtime_stats``, the speedup, and so
fast_p, which counts speedups) is the judge's own; what the kernel's process reports is shown
under ``timing_figures.kernel_reported``, labelled as its own, and used for nothing. The
published figures stay within the residual of the honest twin's, the forged ones appear under
``kernel_reported`` and nowhere else; the judge's own back-to-back and graph figures are null
(the judge takes none).
"""

import math
from typing import Any

from tests.adversarial.cheats.hooks import SEES_CALLS
from tests.adversarial.corpus import (
    MATMUL_HONEST,
    SIZE_1MS,
    SIZES,
    Cheat,
    Expect,
    Family,
    Size,
    sized_compare,
    timing_figures,
)

FORGED_MS = 0.000123
FORGED_REASON = "forged by the kernel's process"
FORGED_CALLS = 424242
FORGED_WARM_UP_MS = 1234.5
KERNEL_REPORTED = ("kernel_exec_result", "metadata", "timing_figures", "kernel_reported")

FORGED_REPORT = """
_FORGED_MS = @FORGED_MS@
_FORGED_REASON = "@FORGED_REASON@"


def _forged_report(report):
    return report.model_copy(update={
        "back_to_back_ms": _FORGED_MS, "back_to_back_calls": 1000,
        "back_to_back_round_ms": [_FORGED_MS] * 5, "back_to_back_reason": _FORGED_REASON,
        "graph_ms_per_call": _FORGED_MS, "graph_calls_per_replay": 1000,
        "graph_replay_ms": [_FORGED_MS] * 5, "graph_reason": _FORGED_REASON,
        "device_busy_ms": _FORGED_MS, "host_sync_ms": [_FORGED_MS] * 20,
        "event_ms": [_FORGED_MS] * 20})
""".replace("@FORGED_MS@", repr(FORGED_MS)).replace("@FORGED_REASON@", FORGED_REASON)

SOURCES = {
    "extras": SEES_CALLS + FORGED_REPORT + """

def _forge():
    kernel = _session.KernelSession
    extras = kernel.HANDLERS[_session.Extras]

    def forged(self, message, fds):
        reply = extras(self, message, fds)
        if isinstance(reply, _session.ExtraFigures):
            return _session.ExtraFigures(report=_forged_report(reply.report))
        return reply

    kernel.HANDLERS[_session.Extras] = forged


_forge()
""",
    "warm_up": SEES_CALLS + f"""

def _forge():
    kernel = _session.KernelSession
    warm_up = kernel.HANDLERS[_session.WarmUp]

    def forged(self, message, fds):
        reply = warm_up(self, message, fds)
        if isinstance(reply, _session.WarmedUp):
            return _session.WarmedUp(calls={FORGED_CALLS}, ms={FORGED_WARM_UP_MS})
        return reply

    kernel.HANDLERS[_session.WarmUp] = forged


_forge()
""",
}
BODY = """

class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)
"""


def published_as_the_judges(body: dict[str, Any], forged: tuple[float, ...]) -> list[str]:
    """Where in ``body`` a number of ``forged`` appears other than under kernel_reported,
    and any stage timing made negative."""
    found: list[str] = []

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if path == KERNEL_REPORTED:
            return
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, (*path, str(key)))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, (*path, str(i)))
        elif isinstance(node, (int, float)) and not isinstance(node, bool):
            if any(math.isclose(node, f, rel_tol=1e-6) for f in forged):
                found.append(f"{'.'.join(path)} = {node}")
            if path[:1] == ("stage_timings",) and node < 0:
                found.append(f"{'.'.join(path)} = {node} (a stage of negative time)")

    walk(body, ())
    return found


def extras_shown_as_the_kernels(body: dict[str, Any], twin: dict[str, Any]) -> str | None:
    """The forged figures reached the server, under kernel_reported and nowhere else."""
    own = timing_figures(body).get("kernel_reported") or {}
    if own.get("back_to_back_ms") != FORGED_MS or own.get("cuda_graph_ms") != FORGED_MS:
        return f"the forged figures did not reach the server, so the attack did not run: {own}"
    elsewhere = published_as_the_judges(body, (FORGED_MS,))
    if elsewhere:
        return f"forged figures published as the judge's: {elsewhere}"
    figures = timing_figures(body)
    if figures.get("cuda_graph_ms") is not None or figures.get("back_to_back_ms") is not None:
        return f"the judge publishes graph or back-to-back figures it did not take: {figures}"
    return None


def warm_up_not_published(body: dict[str, Any], twin: dict[str, Any]) -> str | None:
    """The forged warm-up figures appear nowhere but under kernel_reported."""
    elsewhere = published_as_the_judges(body, (float(FORGED_CALLS), FORGED_WARM_UP_MS))
    return f"the kernel's own warm-up figures published: {elsewhere}" if elsewhere else None


def case(variant: str, size: Size) -> Cheat:
    return Cheat(
        name=f"forged_{variant}_figures_{size.label}",
        family=Family.TIMING,
        technique="forged_extra_figures",
        tries=f"replaces the {variant} handler of KernelSession.HANDLERS so its answer "
              f"carries forged figures (~{size.label})",
        caught_by="every published figure the judge's; the kernel's own shown under "
                  "kernel_reported, used for nothing",
        build=sized_compare(size, SOURCES[variant] + BODY, full_run=True),
        honest=sized_compare(size, MATMUL_HONEST, full_run=True),
        gpu=size.cpu_n is None,
        expect=(Expect.BOUNDED,),
        check=extras_shown_as_the_kernels if variant == "extras" else warm_up_not_published,
        size=size,
    )


CASES = (*(case("extras", size) for size in SIZES), case("warm_up", SIZE_1MS))
