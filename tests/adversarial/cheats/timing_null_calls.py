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

Caught by: the hand-over's cost subtracted is the null calls' between the samples held to at
most the calibration's (measured before the kernel's code was loaded) plus twice its
standard error, and never more than 1 us above it: a null call made slow after loading
gains at most that allowance. The published figures stay within the residual of
the honest twin's, and the null calls' own figure shows the work they carried. Except by
chance (``KNOWN_WIN``): where the calibration itself read high, the cheat keeps it.
"""

from typing import Any

from tests.adversarial.cheats.hooks import SEES_CALLS, SLOWS_NULL_CALLS
from tests.adversarial.corpus import (
    MATMUL_HONEST,
    SIZES,
    Cheat,
    Expect,
    Family,
    KnownWin,
    Size,
    exec_result,
    median_ms,
    sized_compare,
    timing_figures,
)
from tests.adversarial.outcomes import residual_ms

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
    twin's (the attack ran), and the cost subtracted was the lower of the calibration's and
    theirs."""
    figures, honest = timing_figures(body), median_ms(twin) or 0.0
    before, between = figures.get("handover_before_ms"), figures.get("handover_between_ms")
    normal = timing_figures(twin).get("handover_between_ms")
    if before is None or between is None or normal is None:
        return f"no null-call figures to show the attack ran: {figures}"
    if between < normal + 0.5 * honest:
        return (f"the null calls between the samples read {between:.4g} ms against the "
                f"twin's {normal:.4g} ms: they did not carry the extra work ({honest:.4g} ms)")
    allowance = figures.get("handover_allowance_ms") or 0.0
    held = min(between, before + allowance)
    if abs((figures.get("handover_ms") or 0.0) - held) > 2e-6:
        return (f"the cost subtracted, {figures.get('handover_ms')} ms, is not the slowed null "
                f"calls' {between} ms held to the calibration's {before} ms plus its "
                f"allowance of {allowance} ms")
    return None


KNOWN_WIN = (
    "a kernel that slows only its null calls keeps the calibration (plus its allowance) as "
    "the cost subtracted, whatever it read, where an honest kernel gets the null calls "
    "between its samples. On the CPU the calibration reads high at times (2-core host, "
    "n=1024: 5 of 25 pairings of a corpus run read 3.0-4.0 ms against 1.35 ms, 1 of 20 "
    "honest compares in a row; the null calls between their samples 1.7-2.0 ms; up to 17 ms "
    "with other load), and the cheat then reads fast by the difference (a 4.0 ms calibration "
    "makes an 11 ms matmul read 23% fast). Proposed: judge.clock.calibrate takes the "
    "calibration twice, a pause between, and keeps the lower; and profiling.integrity.judge "
    "flags null calls between the samples that read above the samples themselves (a null "
    "call does less than a sample)")


def kept_a_high_calibration(body: dict[str, Any], twin: dict[str, Any]) -> bool:
    """The cost subtracted is the calibration's (taken before the kernel loaded) with its
    allowance, and it exceeds the twin's by more than the residual: the cheat's win is the
    calibration's error, kept."""
    figures = timing_figures(body)
    mine, before = figures.get("handover_ms"), figures.get("handover_before_ms")
    allowance = figures.get("handover_allowance_ms") or 0.0
    theirs, honest = timing_figures(twin).get("handover_ms"), median_ms(twin)
    gpu = (exec_result(body).get("metadata") or {}).get("device") == "cuda"
    if mine is None or before is None or theirs is None or honest is None \
            or abs(mine - (before + allowance)) > 2e-6:
        return False
    return bool(mine - theirs > residual_ms(honest, gpu))


def case(variant: str, size: Size) -> Cheat:
    return Cheat(
        name=f"{variant}_{size.label}",
        family=Family.TIMING,
        technique="message_arrival",
        tries=f"{variant}: null calls told apart by the Call's purpose and made as slow as a "
              f"sample, to raise the hand-over cost subtracted (~{size.label})",
        caught_by="the null calls' figure is subtracted held to the calibration's (before "
                  "the kernel loaded) plus its allowance",
        build=sized_compare(size, SOURCES[variant]),
        honest=sized_compare(size, MATMUL_HONEST),
        gpu=size.cpu_n is None,
        expect=(Expect.BOUNDED,),
        check=null_calls_carried_the_work,
        size=size,
        known_win=KnownWin(KNOWN_WIN, shows=kept_a_high_calibration),
    )


CASES = tuple(case(variant, size) for variant in SOURCES for size in SIZES)
