"""A timing request and the server's verdict on it, measured again when the first reading
was disturbed.

A disagreement between a figure and its bound is what a cheat looks like, and also what an
honest microsecond kernel looks like while the host is busy for a moment (a worker starting
beside it). Such interference passes; a cheat does not: the second reading is taken on a
settled device, and its verdict stands, unless the host's state moved under it as well
(its null calls rose beyond the allowance), or it read host-bound again: then a third
reading's stands. (An honest 3 us kernel read host-bound twice in a row once in 80
evaluations on the H100, and was reported at 28x its time; a call that is host-bound reads
so every time and pays one reading more. A flagged second reading stands: a cheat gains
nothing from a third.)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
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
from shared.protocol import Failure, Message

R = TypeVar("R", bound=Message)
# A reading that asks to be taken again is, once; and once more where that second reading
# was itself disturbed (the host's state moved under it: TimingVerdict.disturbed) or read
# host-bound again
MOST_READINGS = 3
IMPLAUSIBLE = ("its timing report is not plausible ({}); the kernel's code must have "
               "interfered with the timer")


async def measured(seat: Seat, worker: Worker, side: Side, message: Message,
                   expected: type[R] | tuple[type[Message], ...],
                   verdict_of: Callable[[R, str | None], TimingVerdict],
                   stage: Stage = Stage.TIMING,
                   before_again: Callable[[], Awaitable[str | None]] | None = None
                   ) -> tuple[R, TimingVerdict, Observed]:
    """``message`` timed on ``worker`` and its verdict (by ``verdict_of(reply, remeasured)``),
    once more on a settled device if the first verdict asks for it (``before_again()`` first,
    where given: what it did is added to the note). Raises :class:`KernelFailed` for a report
    that cannot be believed."""
    reply, seen = await seat.timed(worker, side, stage, message, expected)
    verdict = _verdict(side, reply, verdict_of, None)
    why = verdict.worth_measuring_again()
    if not why:
        return reply, verdict, seen
    for reading in range(2, MOST_READINGS + 1):
        note = "; ".join(why)[:500]
        if before_again is not None and (done := await before_again()):
            note = f"({done}) {note}"
        if reading > 2:
            note = f"(reading {reading}: the one before was disturbed) {note}"
        reply, seen = await seat.timed(worker, side, stage, message, expected,
                                       SETTLE_BEFORE_REMEASURE_S)
        verdict = _verdict(side, reply, verdict_of, note)
        why = verdict.worth_measuring_again()
        if not why or not (verdict.disturbed or verdict.host_bound):
            break
    return reply, verdict, seen


def _verdict(side: Side, reply: R, verdict_of: Callable[[R, str | None], TimingVerdict],
             remeasured: str | None) -> TimingVerdict:
    try:
        return verdict_of(reply, remeasured)
    except ImplausibleReport as exc:
        raise KernelFailed(side, Failure(outcome=Outcome.RUNTIME_ERROR,
                                         message=IMPLAUSIBLE.format(exc))) from exc


def assess_with(requested: int | None, device: str) -> Callable[..., TimingVerdict]:
    """The verdict of a timing taken inside one process (the reference, /evaluate)."""
    def verdict_of(reply: object, remeasured: str | None) -> TimingVerdict:
        return integrity.assess(reply.timing, requested, device, remeasured)  # type: ignore[attr-defined]
    return verdict_of
