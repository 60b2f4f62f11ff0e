"""Hand-overs begun one ahead (judge.handover.Lookahead): the next hand-over begins before the
last one's interval is taken, each interval and kept output stays its own call's, and nothing
is begun ahead where the clock cannot (a call answered late, a process timed beside)."""

from __future__ import annotations

from typing import Any

import torch

from judge import clock
from judge.clock import CandidateRun, calibrate, time_run
from judge.handover import Begun, Clock, write_inputs
from shared.protocol import CallDone, CallPurpose
from tests.unit.judge.cpu_judge import Slots, SlotsHandOver, vector_slots
from tests.unit.judge.test_clock import FakePartner


class Doubling(FakePartner):
    """A kernel's process whose call writes twice its input into the output slot."""

    def __init__(self, slots: Slots) -> None:
        super().__init__()
        self.slots = slots

    def call(self, purpose: CallPurpose, index: int) -> CallDone:
        if purpose == CallPurpose.SAMPLE:
            self.slots.outputs[0].copy_(self.slots.inputs[0] * 2)
        return super().call(purpose, index)


class BeginsAhead(SlotsHandOver):
    """A GPU's hand-over played in-process: :meth:`begin` runs the call at once and copies its
    outputs into the copy of its number's parity (as the device would by the time its
    interval is taken), :meth:`finish` makes that copy the holder. Logs both; the call
    numbered ``late`` is answered late (it waited for the device from inside)."""

    ahead = True

    def __init__(self, partner: Any, slots: Slots, late: int | None = None) -> None:
        super().__init__(partner, slots)
        self.holders = [[torch.empty_like(s) for s in slots.outputs] for _ in range(2)]
        self.late = late
        self.log: list[tuple[str, int]] = []
        self.open, self.most_open = 0, 0

    def begin(self, values: list[Any], purpose: CallPurpose, index: int, seq: int,
              deadline: float) -> Begun:
        self.log.append(("begin", seq))
        write_inputs(self.slots, values)  # type: ignore[arg-type]
        done = self.partner.call(purpose, index)
        holder = self.holders[seq % 2]
        for mine, slot in zip(holder, self.slots.outputs):
            mine.copy_(slot)
        if seq == self.late:
            self.released_early += 1
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        return Begun(seq, done, purpose, None, holder)

    def finish(self, begun: Begun, deadline: float) -> tuple[float, CallDone]:
        self.log.append(("finish", begun.seq))
        self.open -= 1
        self.holder = begun.holder
        return (self.sample_ms if begun.start == CallPurpose.SAMPLE else self.null_ms), begun.done

    def call(self, values: list[Any], purpose: CallPurpose, index: int, seq: int,
             deadline: float) -> tuple[float, CallDone]:
        return self.finish(self.begin(values, purpose, index, seq, deadline), deadline)


def ahead_run(samples: int | None, late: int | None = None
              ) -> tuple[BeginsAhead, Doubling, CandidateRun]:
    slots = vector_slots(4)
    partner = Doubling(slots)
    over = BeginsAhead(partner, slots, late)
    ran = time_run(Clock(partner, slots, over),  # type: ignore[arg-type]
                   lambda i: [torch.full((4,), float(i))],
                   lambda i, values: [[i]], samples, [0.2] * 16, 0.5)
    return over, partner, ran


def begun_before_finished(log: list[tuple[str, int]]) -> list[int]:
    """The hand-overs whose successor began before their interval was taken."""
    order = {entry: n for n, entry in enumerate(log)}
    return [seq for what, seq in log if what == "finish"
            and order.get(("begin", seq + 1), len(log)) < order[("finish", seq)]]


def test_each_hand_over_begins_before_the_last_ones_interval_is_taken() -> None:
    over, partner, ran = ahead_run(24)
    finished = [seq for what, seq in over.log if what == "finish"]
    # every hand-over but the run's last had the next one begun before its interval was taken
    assert len(finished) == 24 + 24 // clock.NULL_EVERY
    assert begun_before_finished(over.log) == finished[:-1]
    assert over.most_open == 2 and over.open == 0
    # no sample begun beyond the count asked for; a null call after every fourth
    purposes = [p for p, _ in partner.calls]
    assert purposes.count(CallPurpose.SAMPLE) == 24 and len(ran.timing.trusted_ms) == 24
    assert ran.timing.null_ms == [0.2] * (24 // clock.NULL_EVERY)
    assert ran.timing.trusted_ms == [0.7] * 24


def test_the_outputs_kept_are_their_own_samples_not_the_one_begun_after() -> None:
    for _ in range(5):
        _, _, ran = ahead_run(24)
        assert ran.kept.kept
        for kept in ran.kept.kept:
            assert kept.outputs[0].tolist() == [2.0 * kept.index] * 4
            assert kept.input_prints == [[kept.index]]


def test_a_sample_begun_ahead_of_an_adaptive_runs_stop_ends_unused() -> None:
    over, partner, ran = ahead_run(None)
    taken = len(ran.timing.trusted_ms)
    assert [p for p, _ in partner.calls].count(CallPurpose.SAMPLE) == taken + 1
    assert over.open == 0  # (it ended before the kernel's process was asked for its extras)
    assert partner.extras_asked == 1
    assert ran.timing.fresh_inputs == taken + 1


def test_after_a_call_answered_late_nothing_begins_ahead() -> None:
    over, _, ran = ahead_run(24, late=6)
    ahead = begun_before_finished(over.log)
    assert ahead and max(ahead) <= 6
    assert len(ran.timing.trusted_ms) == 24 and over.most_open == 2


def test_the_calibration_begins_each_null_call_while_the_last_runs() -> None:
    slots = vector_slots(4)
    partner = Doubling(slots)
    over = BeginsAhead(partner, slots)
    figures = calibrate(Clock(partner, slots, over), [torch.ones(4)])  # type: ignore[arg-type]
    assert figures == [0.2] * clock.CALIBRATION_CALLS
    calls = 2 * clock.CALIBRATION_CALLS + clock.CALIBRATION_WARMUP
    assert len(partner.calls) == calls and over.open == 0 and over.most_open == 2
    # each round's calls one ahead of each other (nothing begun across the rounds' pause)
    assert len(begun_before_finished(over.log)) == calls - clock.CALIBRATION_ROUNDS


def test_inputs_made_in_the_last_samples_tensors_wait_for_its_outputs_and_prints() -> None:
    """A source that makes each sample's inputs in the same tensors: the next sample is not
    begun before the last one's fingerprints are taken (the audit checks the inputs it makes
    again against them), and every kept sample holds its own outputs and prints."""
    slots = vector_slots(4)
    partner = Doubling(slots)
    over = BeginsAhead(partner, slots)
    shared = torch.zeros(4)

    def in_place(i: int) -> list[Any]:
        shared.fill_(float(i))
        return [shared]

    ran = time_run(Clock(partner, slots, over),  # type: ignore[arg-type]
                   in_place, lambda i, values: [[int(values[0][0])]], 24, [0.2] * 16, 0.5,
                   values_apart=False)
    assert ran.kept.kept
    for kept in ran.kept.kept:
        assert kept.input_prints == [[kept.index]]
        assert kept.outputs[0].tolist() == [2.0 * kept.index] * 4
    # no sample began before the one before it was finished (a null call still may)
    samples = {seq for seq, (purpose, _) in enumerate(partner.calls, 1)
               if purpose == CallPurpose.SAMPLE}
    assert not set(begun_before_finished(over.log)) & {s - 1 for s in samples}
