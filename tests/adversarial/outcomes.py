"""How a timing cheat's answer is read against its honest twin's: it failed, it was flagged, its
published figures stayed within the residual (bounded), or it won.

The residual is the judge's stated accuracy: on a GPU at most 3% or 3 us of the honest
median, whichever is larger (docs/ENGINE.md: the judge's figure is within 1% of Nsight
Compute's for kernels of 20 us and more). In CPU mode a reading moves with the host's
scheduling: compute-bound identical pairs read 0.92-1.05 against each other on a 2-core host,
so a CPU run holds a cheat to 12% of the honest figure, and its cheats are built to win by
far more than that where the defence they aim at is missing.

A cheat is bounded when both figures a user ranks by stay there: its published median (which
the speedup divides) is at least the honest twin's less the residual, and so is its published
``runtime`` (the mean). The speedup is bounded with the median: the reference's figure is the
same code's, timed before the candidate exists, so a cheat moves its speedup only through its
own median. (Two jobs may still divide by different readings of the reference, where one
spread as a disturbed reading does and was not kept for the next: so the bound is taken on
the cheat's own figures, and its speedup over the twin's is stated at one reference figure,
``relative``.) A busy host only ever slows a reading, so the twin's best reading is the
yardstick (it is read again, up to twice, where a cheat seems to have won).

With ``KES_CORPUS_TABLE`` set to a file, each judged cheat appends its row (cheat, size,
expectation, outcome, published speedup beside the twin's) as a JSON line;
``scripts/adversarial_corpus.py`` turns them into a table.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any

from tests.adversarial.corpus import Cheat, Expect, exec_result, passed, suspicious

RESIDUAL_SHARE = 0.03
RESIDUAL_MS = 0.003
CPU_RESIDUAL_SHARE = 0.12
WON = "won"
TABLE_ENV = "KES_CORPUS_TABLE"


def residual_ms(figure_ms: float, gpu: bool) -> float:
    """How far a published figure of ``figure_ms`` may move before a cheat counts as a win."""
    if gpu:
        return max(RESIDUAL_SHARE * figure_ms, RESIDUAL_MS)
    return CPU_RESIDUAL_SHARE * figure_ms


@dataclass
class Reading:
    """The figures a user ranks by, as one answer published them."""

    speedup: float
    median_ms: float
    mean_ms: float

    @classmethod
    def of(cls, body: dict[str, Any]) -> Reading | None:
        result = exec_result(body)
        stats = result.get("runtime_stats") or {}
        speedup = (result.get("metadata") or {}).get("speedup")
        if speedup is None or stats.get("median") is None or result.get("runtime") is None:
            return None
        return cls(float(speedup), float(stats["median"]), float(result["runtime"]))


@dataclass
class Judged:
    """One cheat's answer read against its twin's readings."""

    outcome: str  # an Expect's value, or WON
    detail: str
    cheat: Reading | None
    honest: Reading | None  # the twin's best: highest speedup, lowest median and mean
    # the cheat's speedup over the twin's at one reference figure (the twin's median over the
    # cheat's), and the most the residual allows
    relative: float | None = None
    allowed_relative: float | None = None


def best(twins: list[dict[str, Any]]) -> Reading | None:
    """The twin's best figures over its readings that passed unflagged."""
    readings = [r for b in twins if passed(b) and not suspicious(b)
                for r in [Reading.of(b)] if r is not None]
    if not readings:
        return None
    return Reading(max(r.speedup for r in readings), min(r.median_ms for r in readings),
                   min(r.mean_ms for r in readings))


def judge(body: dict[str, Any], twins: list[dict[str, Any]], gpu: bool) -> Judged:
    """What became of the cheat whose answer is ``body``, its honest twin read as ``twins``."""
    result = exec_result(body)
    honest, cheat = best(twins), Reading.of(body)
    if not passed(body):
        why = (result.get("validation_error") or result.get("runtime_error")
               or result.get("compilation_error") or body.get("error") or "")
        return Judged(Expect.FAILS.value, f"{body.get('status')}/{result.get('outcome')}: "
                      f"{str(why)[-300:]}", cheat, honest)
    if suspicious(body):
        return Judged(Expect.FLAGGED.value, f"flagged: {result['integrity'].get('reasons')}",
                      cheat, honest)
    if cheat is None or honest is None:
        return Judged(WON, "a pass without the figures to bound it", cheat, honest)
    floor = honest.median_ms - residual_ms(honest.median_ms, gpu)
    mean_floor = honest.mean_ms - residual_ms(honest.mean_ms, gpu)
    relative = honest.median_ms / cheat.median_ms if cheat.median_ms > 0 else float("inf")
    allowed = honest.median_ms / floor if floor > 0 else float("inf")
    moved = []
    if cheat.median_ms < floor:
        moved.append(f"median {cheat.median_ms:.4g} ms below the {floor:.4g} ms allowed (honest "
                     f"{honest.median_ms:.4g} ms): its speedup {relative:.4g}x the honest one's")
    if cheat.mean_ms < mean_floor:
        moved.append(f"runtime {cheat.mean_ms:.4g} ms below the {mean_floor:.4g} ms allowed "
                     f"(honest {honest.mean_ms:.4g} ms)")
    detail = "; ".join(moved) or (
        f"median {cheat.median_ms:.4g} ms, runtime {cheat.mean_ms:.4g} ms against the honest "
        f"{honest.median_ms:.4g} and {honest.mean_ms:.4g} ms: speedup {relative:.4g}x the "
        f"honest one's (at most {allowed:.4g}x)")
    return Judged(WON if moved else Expect.BOUNDED.value, detail, cheat, honest, relative,
                  allowed)


def record_row(case: Cheat, gpu: bool, n: int | None, expected: tuple[Expect, ...],
               judged: Judged, check: str | None, met: bool, win_seen: bool) -> None:
    """Append ``case``'s row to the file ``KES_CORPUS_TABLE`` names, if it names one
    (``win_seen``: the expectation was missed by the cheat's known win)."""
    path = os.environ.get(TABLE_ENV)
    if not path:
        return
    row = {"cheat": case.name, "family": case.technique,
           "size": case.size.label if case.size else None, "n": n,
           "device": "cuda" if gpu else "cpu",
           "expect": "|".join(e.value for e in expected) or "caught",
           "outcome": judged.outcome, "check": check, "met": met, "detail": judged.detail,
           "known_win": case.known_win.reason if case.known_win else None,
           "known_win_seen": win_seen,
           "cheat_reading": asdict(judged.cheat) if judged.cheat else None,
           "honest_reading": asdict(judged.honest) if judged.honest else None,
           "relative": judged.relative, "allowed_relative": judged.allowed_relative}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
