"""Timing: tell the harness's null calls from timed samples, and make only the null calls slow.

Tries: the judge subtracts the hand-over's own cost, which it measures with null calls (the
same hand-over, no kernel call), from every sample. A kernel that read ``judge/clock.py``
knows that a null call follows every 4th sample and that the server may take their figure in
place of the calibration's; the ``Call`` message says which it is. So the kernel rebinds
``KernelSession.handed_over`` and ``copied_out`` and, inside the hand-over of every null
call, does as much work as a sample's (the matmul of the inputs the arena holds, kept by
their content for a sample that might meet them again: none does, inputs never repeat). Were
that figure subtracted, every sample would read near zero. Variants:

- ``null_work``: only the null calls carry the extra work;
- ``all_but_timed``: every call the kernel believes untimed does the work twice (correctness
  trials, the warm-up, the figures beside, the null calls), timed samples once.

Caught by: the hand-over's cost subtracted is the smaller of the calibration's (measured
before the kernel's code was loaded) and the null calls' between the samples: a null call
made slow after loading lowers nothing. The published figures stay within the residual of
the honest twin's, and the null calls' own figure shows the work they carried.
"""

from typing import Any

from tests.adversarial.cheats.hooks import SEES_CALLS, SLOWS_NULL_CALLS
from tests.adversarial.corpus import (
    MATMUL_HONEST,
    SIZES,
    Cheat,
    Expect,
    Family,
    Size,
    median_ms,
    sized_compare,
    timing_figures,
)

NULL_WORK = SEES_CALLS + """
_kept = {}


def _null_work(arena):
    a, b = arena.inputs[0], arena.inputs[1]
    _kept.clear()
    _kept[(a.data_ptr(), b.data_ptr(), "never hit: inputs never repeat")] = torch.matmul(a, b)
""" + SLOWS_NULL_CALLS

SOURCES = {
    "null_work": NULL_WORK + """

class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)
""",
    "all_but_timed": NULL_WORK + """

class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        if not _timed():
            torch.matmul(a, b)  # slow wherever the kernel believes nobody times it
        return torch.matmul(a, b)
""",
}


def null_calls_carried_the_work(body: dict[str, Any], twin: dict[str, Any]) -> str | None:
    """The null calls between the samples read at least half a sample's work above the
    calibration's (the attack ran), and that figure was not the one subtracted."""
    figures, honest = timing_figures(body), median_ms(twin) or 0.0
    before, between = figures.get("handover_before_ms"), figures.get("handover_between_ms")
    if before is None or between is None:
        return f"no null-call figures to show the attack ran: {figures}"
    if between < before + 0.5 * honest:
        return (f"the null calls between the samples read {between:.4g} ms against the "
                f"calibration's {before:.4g} ms: they did not carry the extra work "
                f"({honest:.4g} ms)")
    if figures.get("handover_ms") != before:
        return f"the slowed null calls' figure was subtracted: {figures.get('handover_ms')}"
    return None


def case(variant: str, size: Size) -> Cheat:
    return Cheat(
        name=f"{variant}_{size.label}",
        family=Family.TIMING,
        technique="message_arrival",
        tries=f"{variant}: null calls told apart by the Call's purpose and made as slow as a "
              f"sample, to raise the hand-over cost subtracted (~{size.label})",
        caught_by="the smaller of the calibration (before the kernel loaded) and the null "
                  "calls' figure is subtracted",
        build=sized_compare(size, SOURCES[variant]),
        honest=sized_compare(size, MATMUL_HONEST),
        gpu=size.cpu_n is None,
        expect=(Expect.BOUNDED,),
        check=null_calls_carried_the_work,
        size=size,
    )


CASES = tuple(case(variant, size) for variant in SOURCES for size in SIZES)
