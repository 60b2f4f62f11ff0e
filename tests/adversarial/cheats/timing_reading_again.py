"""Timing: spoil the first reading so that it is taken again, and run well in the next.

Tries: the server takes a reference's reading again where the first was disturbed (its
median far above its fastest samples) and keeps the faster; a kernel that read
``orchestration/flows/timing.py`` hopes for the same second chance. It counts its readings
(each begins with the judge's ``WarmUp``) and its timed samples, and in its first reading
only:

- ``disturbed_first``: three samples in five do the work three times over, so the reading
  spreads as a disturbed one does (median about 3x its 10th percentile);
- ``slowing_first``: each sample does more work than the last (sample k, k // 2 extra
  products), so the run is cut short as a kernel that slows down.

Any later reading runs honestly, so the reading kept, were there a choice, would be the honest
one.
Caught by: a candidate's first reading is its figure, whatever it reads (no second chance):
``disturbed_first`` publishes the slow reading it made (within the residual of the honest twin
from above, never below), ``slowing_first`` is published cut short and flagged (on the CPU,
where noise can hide its steady rise, at least its slow figure as measured).
"""

from typing import Any

from tests.adversarial.cheats.hooks import SEES_CALLS
from tests.adversarial.corpus import (
    MATMUL_HONEST,
    SIZES,
    Cheat,
    Expect,
    Family,
    Size,
    exec_result,
    median_ms,
    sized_compare,
    timing_figures,
)

SOURCES = {
    "disturbed_first": SEES_CALLS + """

def _extra():
    if _seen["readings"] != 1 or not _timed():
        return 0
    return 2 if _seen["samples"] % 5 in (1, 2, 3) else 0
""",
    "slowing_first": SEES_CALLS + """

def _extra():
    if _seen["readings"] != 1 or not _timed():
        return 0
    return _seen["samples"] // 2
""",
}
BODY = """

class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        for _ in range(_extra()):
            torch.matmul(a, b)  # thrown away
        return torch.matmul(a, b)
"""


def first_reading_stands(body: dict[str, Any], twin: dict[str, Any]) -> str | None:
    """The disturbed first reading is the one published (not a second, honest one)."""
    checks = (exec_result(body).get("integrity") or {}).get("checks") or []
    again = [c for c in checks if "measured again" in c]
    if again:
        return f"the candidate was measured again: {again}"
    median, honest = median_ms(body), median_ms(twin)
    if median is None or honest is None or median < 1.5 * honest:
        return (f"the published median {median} ms is not the disturbed first reading's "
                f"(the honest twin reads {honest} ms)")
    return None


def cut_short_as_slowing(body: dict[str, Any], twin: dict[str, Any]) -> str | None:
    """The first reading is the one published: cut short as a slowing kernel's, or (on the
    CPU, whose noise can hide the steady rise from the cut) its slow figure as measured."""
    figures = timing_figures(body)
    if figures.get("stopped_by") == "slowing":
        return None
    median, honest = median_ms(body), median_ms(twin)
    if figures.get("clock") == "perf_counter" and median is not None and honest is not None \
            and median > 1.5 * honest:
        return None
    return (f"the published reading was not the first, slowing one: stopped by "
            f"{figures.get('stopped_by')}, median {median} ms against the honest {honest} ms")


def case(variant: str, size: Size) -> Cheat:
    disturbed = variant == "disturbed_first"
    return Cheat(
        name=f"reading_again_{variant}_{size.label}",
        family=Family.TIMING,
        technique="readings_again",
        tries=f"{variant}: spoils its first reading, runs honestly in any later one, hoping "
              f"to be read again (~{size.label})",
        caught_by="a candidate's first reading is its figure: no second chance",
        build=sized_compare(size, SOURCES[variant] + BODY),
        honest=sized_compare(size, MATMUL_HONEST),
        gpu=size.cpu_n is None,
        expect=(Expect.BOUNDED,) if disturbed else (Expect.FLAGGED,),
        # (on the CPU noise can break the steady rise the cut looks for: then the slow first
        # reading is published as measured, which gains nothing)
        cpu_expect=None if disturbed else (Expect.FLAGGED, Expect.BOUNDED),
        check=first_reading_stands if disturbed else cut_short_as_slowing,
        size=size,
    )


CASES = tuple(case(variant, size) for variant in SOURCES for size in SIZES)
