"""A timing request and the server's verdict on it, measured again where the caller says.

A comparison's timings are the judge's own (:func:`profiling.integrity.judge`). A candidate's
first reading is its figure, whatever it reads: a reading taken again could only ever be a
second chance. The reference's is taken once more where the first was disturbed
(:func:`disturbed`), and on the CPU always (:func:`twice`), the faster reading kept: a
baseline measured while something slowed it must not make every candidate look fast, and a
second chance for a baseline only lowers the candidates' speedups.
/evaluate's in-process timing (no judge) is read again where it disagrees with its own
cross-checks or reads host-bound (:meth:`TimingVerdict.worth_measuring_again`): a host busy
for a moment reads so once, a cheat or a host-bound call every time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from orchestration.job_step import Side, Stage
from orchestration.placement import (
    SETTLE_BEFORE_REMEASURE_S,
    KernelFailed,
    Observed,
    Seat,
)
from orchestration.worker import Worker
from profiling import integrity
from profiling.integrity import ImplausibleReport, TimingVerdict
from shared.models import Outcome
from shared.protocol import Failure, Message, SelfTimed

R = TypeVar("R", bound=Message)
# at most this many readings; a third only where the second was itself disturbed or
# host-bound again
MOST_READINGS = 3
IMPLAUSIBLE = ("its timing report is not plausible ({}); the kernel's code must have "
               "interfered with the timer")


async def measured(seat: Seat, worker: Worker, side: Side, message: Message,
                   expected: type[R] | tuple[type[Message], ...],
                   verdict_of: Callable[[R, str | None], TimingVerdict],
                   stage: Stage = Stage.TIMING,
                   again: Callable[[TimingVerdict], list[str]] | None = None,
                   most: int = MOST_READINGS, faster: bool = False
                   ) -> tuple[R, TimingVerdict, Observed]:
    """``message`` timed on ``worker`` and its verdict (by ``verdict_of(reply, remeasured)``),
    taken again on a settled device while ``again(verdict)`` gives reasons, at most ``most``
    readings; the last reading stands, or with ``faster`` the one of the lowest median.
    Raises :class:`KernelFailed` for a report that cannot be believed."""
    reply, seen = await seat.timed(worker, side, stage, message, expected)
    verdict = _verdict(side, reply, verdict_of, None)
    best = (reply, verdict, seen)
    why = again(verdict) if again is not None else []
    for reading in range(2, most + 1):
        if not why:
            break
        note = "; ".join(why)[:500]
        if reading > 2:
            note = f"(reading {reading}: the one before was disturbed) {note}"
        reply, seen = await seat.timed(worker, side, stage, message, expected,
                                       SETTLE_BEFORE_REMEASURE_S)
        verdict = _verdict(side, reply, verdict_of, note)
        if not faster or verdict.stats.median <= best[1].stats.median:
            best = (reply, verdict, seen)
        why = again(verdict) if again is not None else []
        if not (verdict.disturbed or verdict.host_bound):
            break
    return best


def disturbed(verdict: TimingVerdict) -> list[str]:
    """Why a judged reference reading is taken again (empty: it stands)."""
    return ["the reading was disturbed (its median far above its fastest samples)"] \
        if verdict.disturbed else []


def twice(verdict: TimingVerdict) -> list[str]:
    """Why a CPU reference is read twice: the host's scheduling only ever slows a reading,
    and where a whole reading was slowed its samples do not show it."""
    return ["a CPU-mode reference is read twice and the faster reading kept"]


def _verdict(side: Side, reply: R, verdict_of: Callable[[R, str | None], TimingVerdict],
             remeasured: str | None) -> TimingVerdict:
    try:
        return verdict_of(reply, remeasured)
    except ImplausibleReport as exc:
        raise KernelFailed(side, Failure(outcome=Outcome.RUNTIME_ERROR,
                                         message=IMPLAUSIBLE.format(exc))) from exc


def assess_with(requested: int | None, device: str
                ) -> Callable[[SelfTimed, str | None], TimingVerdict]:
    """The verdict of a timing taken inside one process (/evaluate)."""
    def verdict_of(reply: SelfTimed, remeasured: str | None) -> TimingVerdict:
        return integrity.assess(reply.timing, requested, device, remeasured)
    return verdict_of
