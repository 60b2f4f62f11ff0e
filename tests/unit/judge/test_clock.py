"""The judge's timing run (judge.clock.time_run) against a kernel's process played in-process:
null calls between the samples, what the raw run carries, and the run's time budget."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from judge import clock
from judge.clock import CandidateRun, slowing, time_run
from judge.handover import Clock
from judge.partner import CallOverran
from shared.protocol import (
    CallDone,
    CallPurpose,
    CallTrace,
    ExtraFigures,
    Extras,
    TimingReport,
    WarmedUp,
)
from tests.unit.judge.cpu_judge import SlotsHandOver, vector_slots

TRACED = CallTrace(device="cpu", unobservable="no GPU: kernel launches are not observable "
                   "on the CPU", modes_set=["matmul_tf32=True"], input_dtypes=["float32"])


@dataclass
class FakePartner:
    calls: list[tuple[CallPurpose, int]] = field(default_factory=list)
    quick_warm_ups: list[bool] = field(default_factory=list)
    extras_asked: int = 0
    figures_asked: list[bool] = field(default_factory=list)
    held_to: list[list[int] | None] = field(default_factory=list)
    shares_cores: list[bool] = field(default_factory=list)
    traces_asked: list[bool] = field(default_factory=list)

    def warm_up(self, quick: bool = False, deadline: float | None = None,
                cores: list[int] | None = None, shares_cores: bool = False) -> WarmedUp:
        self.quick_warm_ups.append(quick)
        self.held_to.append(cores)
        self.shares_cores.append(shares_cores)
        return WarmedUp(calls=3, ms=1.5)

    def call(self, purpose: CallPurpose, index: int) -> CallDone:
        self.calls.append((purpose, index))
        return CallDone(index=index, outputs=[], copied=True)

    def extras(self, message: Extras, deadline: float | None = None) -> ExtraFigures:
        self.extras_asked += 1
        self.figures_asked.append(message.figures)
        self.traces_asked.append(message.trace)
        return ExtraFigures(report=TimingReport(method="fake", event_ms=[],
                                                graph_ms_per_call=0.001),
                            trace=TRACED if message.trace else None)


class Stepped(SlotsHandOver):
    """Sample intervals read from ``intervals`` in turn (the last one again once they end)."""

    def __init__(self, partner: Any, intervals: list[float]) -> None:
        super().__init__(partner, vector_slots(4))
        self.intervals = intervals
        self.taken = 0

    def call(self, values: list[Any], purpose: CallPurpose, index: int, seq: int,
             deadline: float) -> tuple[float, CallDone]:
        ms, done = super().call(values, purpose, index, seq, deadline)
        if purpose == CallPurpose.SAMPLE:
            ms = self.intervals[min(self.taken, len(self.intervals) - 1)]
            self.taken += 1
        return ms, done


def run(samples: int | None, hand_over: Any = None,
        cores: list[int] | None = None, where: str = "host") -> tuple[FakePartner, CandidateRun]:
    partner = FakePartner()
    slots = vector_slots(4)
    slots.layout = SimpleNamespace(where=where)
    over = hand_over(partner) if hand_over else SlotsHandOver(partner, slots)
    ran = time_run(Clock(partner, slots, over),  # type: ignore[arg-type]
                   lambda i: [torch.full((4,), float(i))],
                   lambda i, values: [[0] for _ in values], samples, [0.2] * 16, 0.5,
                   cores=cores)
    return partner, ran


def test_the_partner_is_told_its_timing_cores_with_its_warm_up() -> None:
    partner, _ = run(8, cores=[5])
    assert partner.held_to == [[5]]
    partner, _ = run(8)
    assert partner.held_to == [None]


def test_a_null_call_follows_every_fourth_sample_and_never_two_in_a_row() -> None:
    partner, ran = run(24)
    purposes = [p for p, _ in partner.calls]
    assert purposes.count(CallPurpose.SAMPLE) == 24
    assert purposes.count(CallPurpose.CALIBRATE) == 24 // clock.NULL_EVERY
    for i, (purpose, _) in enumerate(partner.calls):
        if purpose == CallPurpose.CALIBRATE:
            assert partner.calls[i - 1][0] == CallPurpose.SAMPLE
    assert ran.timing.null_ms == [0.2] * (24 // clock.NULL_EVERY)


class Steady(Stepped):
    """Every sample ``sample_ms``, every null call ``null_ms``."""

    def __init__(self, partner: Any, sample_ms: float, null_ms: float) -> None:
        super().__init__(partner, [sample_ms])
        self.null_ms = null_ms

    def call(self, values: list[Any], purpose: CallPurpose, index: int, seq: int,
             deadline: float) -> tuple[float, CallDone]:
        ms, done = super().call(values, purpose, index, seq, deadline)
        return (self.null_ms if purpose == CallPurpose.CALIBRATE else ms), done


def nulls_after(partner: FakePartner) -> list[bool]:
    """For each sample in order, whether a null call came right after it."""
    calls = [p for p, _ in partner.calls]
    return [i + 1 < len(calls) and calls[i + 1] == CallPurpose.CALIBRATE
            for i, p in enumerate(calls) if p == CallPurpose.SAMPLE]


def test_an_adaptive_run_of_calls_far_cheaper_than_the_hand_over_takes_a_null_after_each(
        ) -> None:
    """Calls of a tenth of the hand-over's cost, on a device: from the fourth sample on, a
    null call after every sample (their median is as much of the figure's error as the
    samples'). On the CPU, where the hand-over's cost moves with the host, every fourth."""
    partner, ran = run(None, lambda p: Steady(p, 0.22, 0.2), where="device")
    after = nulls_after(partner)
    assert all(after[clock.FAST_AFTER - 1:-1])
    assert len(ran.timing.null_ms) >= len(after) - clock.FAST_AFTER
    host, _ = run(None, lambda p: Steady(p, 0.22, 0.2))
    after = nulls_after(host)
    assert [i for i, a in enumerate(after) if a] == \
        [i for i in range(len(after)) if (i + 1) % clock.NULL_EVERY == 0]


def test_a_fixed_count_or_a_call_dearer_than_the_hand_over_keeps_a_null_every_fourth(
        ) -> None:
    fixed, _ = run(24, lambda p: Steady(p, 0.22, 0.2))
    assert sum(nulls_after(fixed)) == 24 // clock.NULL_EVERY
    dear, _ = run(None, lambda p: Steady(p, 0.7, 0.2), where="device")
    after = nulls_after(dear)
    assert [i for i, a in enumerate(after) if a] == \
        [i for i in range(len(after)) if (i + 1) % clock.NULL_EVERY == 0]


def test_a_short_run_takes_its_null_calls_after_the_samples() -> None:
    partner, ran = run(5)
    purposes = [p for p, _ in partner.calls]
    assert purposes[:6] == [CallPurpose.SAMPLE] * 4 + [CallPurpose.CALIBRATE, CallPurpose.SAMPLE]
    assert purposes[6:] == [CallPurpose.CALIBRATE] * (clock.NULLS_AT_LEAST - 1)
    assert len(ran.timing.null_ms) == clock.NULLS_AT_LEAST


def test_the_raw_run_carries_the_judges_intervals_and_its_calibration() -> None:
    _, ran = run(6)
    timing = ran.timing
    assert timing.trusted_ms == [0.7] * 6
    assert timing.calibration_ms == [0.2] * 16
    assert timing.clock == "perf_counter" and timing.fresh_inputs == 6
    assert timing.cut_short is None
    # the audit never keeps a null call's outputs: only the samples were offered
    assert ran.kept.seen == 6


def test_the_run_says_where_its_time_went() -> None:
    _, ran = run(6)
    assert {"warm_up", "inputs", "samples", "nulls", "keep"} <= set(ran.timing.spent_ms)
    assert all(ms >= 0.0 for ms in ran.timing.spent_ms.values())


def test_a_request_for_fewer_samples_than_the_minimum_gets_a_short_warm_up_and_no_extras() -> None:
    partner, ran = run(1)
    assert partner.quick_warm_ups == [True]
    reason = ran.timing.warmup_reason
    assert reason is not None and "fixed 1 samples" in reason
    # (asked to put its module's state back, for the recheck, and to trace one more call)
    assert partner.figures_asked == [False] and ran.timing.kernel_reported is None
    assert partner.traces_asked == [True] and ran.timing.kernel_trace == TRACED


def test_an_adaptive_run_gets_the_whole_warm_up_and_the_kernels_own_figures_beside() -> None:
    partner, ran = run(None)
    assert partner.quick_warm_ups == [False]
    assert ran.timing.warmup_reason is None
    assert partner.figures_asked == [True]
    assert ran.timing.kernel_reported is not None
    assert ran.timing.kernel_reported.graph_ms_per_call == pytest.approx(0.001)
    # and its trace of one more call, passed on as it came
    assert partner.traces_asked == [True] and ran.timing.kernel_trace == TRACED


def test_a_kernel_whose_calls_keep_slowing_down_ends_its_run_early_and_says_why() -> None:
    rising = [0.3 + 0.05 * i for i in range(200)]
    partner, ran = run(100, lambda p: Stepped(p, rising))
    timing = ran.timing
    assert timing.stopped_by == "slowing"
    assert len(timing.trusted_ms) < 100
    assert timing.cut_short is not None and "slower than the last" in timing.cut_short
    assert partner.figures_asked == [False]
    # (no more calls of a kernel that slows down: no trace)
    assert partner.traces_asked == [False] and timing.kernel_trace is None


def test_no_trace_is_asked_for_where_the_budget_would_not_hold_its_calls() -> None:
    # calls the judge reads at 30 s each: two more would not fit the run's budget
    partner, ran = run(5, lambda p: Stepped(p, [30_000.0]))
    assert ran.timing.cut_short is None
    assert partner.traces_asked == [False] and ran.timing.kernel_trace is None
    # (calls it reads at 0.7 ms are traced in the same run: run(1) above)


def test_a_run_whose_budget_is_spent_ends_with_what_it_measured(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clock, "READING_BUDGET_S", 0.0)
    _, ran = run(50)
    timing = ran.timing
    assert timing.stopped_by == "budget" and len(timing.trusted_ms) == 1
    assert timing.cut_short is not None and "budget" in timing.cut_short


def test_a_call_that_overruns_ends_the_run_with_the_samples_before_it() -> None:
    class Overrunning(SlotsHandOver):
        def call(self, values: list[Any], purpose: CallPurpose, index: int, seq: int,
                 deadline: float) -> tuple[float, CallDone]:
            if purpose == CallPurpose.SAMPLE and index == 3:
                raise CallOverran("stuck")
            return super().call(values, purpose, index, seq, deadline)

    _, ran = run(20, lambda p: Overrunning(p, vector_slots(4)))
    assert len(ran.timing.trusted_ms) == 3
    assert ran.timing.cut_short is not None and "overran" in ran.timing.cut_short


def test_a_first_call_that_overruns_is_the_kernels_failure() -> None:
    class Stuck(SlotsHandOver):
        def call(self, values: list[Any], purpose: CallPurpose, index: int, seq: int,
                 deadline: float) -> tuple[float, CallDone]:
            raise CallOverran("stuck")

    with pytest.raises(CallOverran):
        run(20, lambda p: Stuck(p, vector_slots(4)))


def test_slowing_needs_a_steady_rise_not_a_noisy_one() -> None:
    assert slowing([1.0 + 0.1 * i for i in range(16)]) == pytest.approx(2.35 / 1.15)
    noisy = [1.0, 3.0] * 8  # as slow at the end as at the start
    assert slowing(noisy) is None
    assert slowing([1.0] * 16) is None
    assert slowing([1.0, 2.0, 3.0]) is None  # too few to say


def test_every_hand_over_gets_the_next_number() -> None:
    partner = FakePartner()
    over = SlotsHandOver(partner, vector_slots(4))
    judged = Clock(partner, vector_slots(4), over)  # type: ignore[arg-type]
    time_run(judged, lambda i: [torch.zeros(4)], lambda i, v: [[0]], 8, [0.2] * 16, 0.5)
    assert over.seqs == list(range(1, len(over.seqs) + 1))


def test_the_warm_up_time_published_is_the_judges_not_the_kernels_word() -> None:
    _, ran = run(8)
    # the fake partner reports 1.5 ms; a forged report would move the published stage time
    reported = 1.5
    assert ran.timing.warmup_ms != reported
    assert ran.timing.warmup_ms == ran.timing.spent_ms["warm_up"]


class Scripted:
    """A clock whose null calls read ``high`` ms for the first ``first`` calls, then ``low``."""

    ahead = False  # (each call whole)

    def __init__(self, first: int, high: float, low: float) -> None:
        self.first, self.high, self.low, self.calls = first, high, low, 0

    def call(self, values: Any, purpose: CallPurpose, index: int, deadline: float
             ) -> tuple[float, CallDone]:
        self.calls += 1
        ms = self.high if self.calls <= self.first else self.low
        return ms, CallDone(index=index, outputs=[], copied=True)


def test_a_calibration_round_the_host_disturbed_is_not_the_one_kept() -> None:
    first_round = clock.CALIBRATION_WARMUP + clock.CALIBRATION_CALLS
    disturbed = Scripted(first_round, high=3.0, low=1.0)
    kept = clock.calibrate(disturbed, [])  # type: ignore[arg-type]
    assert kept == [1.0] * clock.CALIBRATION_CALLS
    quiet_first = Scripted(first_round, high=1.0, low=3.0)
    assert clock.calibrate(quiet_first, []) == [1.0] * clock.CALIBRATION_CALLS  # type: ignore[arg-type]


class LoggedPartner(FakePartner):
    """A partner that logs each call as (who, purpose, index, the input's value it ran on)."""

    def __init__(self, who: str, log: list[tuple[str, CallPurpose, int, float]],
                 fail: Exception | None = None) -> None:
        super().__init__()
        self.who, self.log, self.fail = who, log, fail
        self.slots = vector_slots(4)

    def call(self, purpose: CallPurpose, index: int) -> CallDone:
        if self.fail is not None and purpose == CallPurpose.SAMPLE:
            raise self.fail
        self.log.append((self.who, purpose, index, float(self.slots.inputs[0][0])))
        return super().call(purpose, index)


class LoggedQuiet:
    """The judge's probe of the device, logged as ("quiet", ...) before the call it precedes."""

    def __init__(self, log: list[tuple[str, CallPurpose, int, float]]) -> None:
        self.log, self.waited_ms = log, 0.0

    def wait(self, deadline: float) -> None:
        self.log.append(("quiet", CallPurpose.SAMPLE, -1, 0.0))


def interleaved_run(samples: int, fail: Exception | None = None, quiet: bool = False
                    ) -> tuple[list[tuple[str, CallPurpose, int, float]], CandidateRun,
                               LoggedPartner, LoggedPartner]:
    from judge.beside import Beside

    log: list[tuple[str, CallPurpose, int, float]] = []
    cand, ref = LoggedPartner("candidate", log), LoggedPartner("reference", log, fail)
    beside = Beside(Clock(ref, ref.slots,  # type: ignore[arg-type]
                          SlotsHandOver(ref, ref.slots, sample_ms=1.5)), [0.2] * 16,
                    LoggedQuiet(log) if quiet else None)  # type: ignore[arg-type]
    ran = time_run(Clock(cand, cand.slots, SlotsHandOver(cand, cand.slots)),  # type: ignore[arg-type]
                   lambda i: [torch.full((4,), float(i))], lambda i, values: [[0]], samples,
                   [0.2] * 16, 0.5, cores=[3], beside=beside)
    return log, ran, ref, cand


def test_a_reference_beside_takes_each_sample_in_turn_on_the_same_inputs_in_alternate_order(
        ) -> None:
    log, ran, ref, _ = interleaved_run(8)
    samples = [(who, i, value) for who, purpose, i, value in log if purpose == CallPurpose.SAMPLE]
    order = [(who[0], i) for who, i, _ in samples]
    # reference first on even samples, the candidate first on odd ones
    assert order == [("r", 0), ("c", 0), ("c", 1), ("r", 1), ("r", 2), ("c", 2), ("c", 3),
                     ("r", 3), ("r", 4), ("c", 4), ("c", 5), ("r", 5), ("r", 6), ("c", 6),
                     ("c", 7), ("r", 7)]
    # both sides of a sample ran on its inputs
    assert all(value == float(i) for _, i, value in samples)
    assert ran.beside is not None
    assert ran.timing.trusted_ms == [0.7] * 8 and ran.beside.trusted_ms == [1.5] * 8
    assert ran.timing.interleaved and ran.beside.interleaved
    # a null call of each side wherever the candidate takes one (after every fourth sample,
    # then the short run's least), and the reference warmed up held to the candidate's core
    assert len(ran.beside.null_ms) == len(ran.timing.null_ms) == clock.NULLS_AT_LEAST
    nulls = [(who[0], i) for who, purpose, i, _ in log if purpose == CallPurpose.CALIBRATE]
    assert nulls[:2] == [("c", 3), ("r", 3)]
    assert ran.beside.calibration_ms == [0.2] * 16 and ref.held_to == [[3]]
    # nothing of the candidate's own report is the reference's
    assert ran.beside.kernel_reported is None and ran.beside.kernel_trace is None


def test_a_reference_beside_that_overruns_is_the_references_failure_not_the_candidates(
        ) -> None:
    from judge.errors import ReferenceFailed

    with pytest.raises(ReferenceFailed, match="timed beside the candidate's, failed"):
        interleaved_run(8, fail=CallOverran("the kernel's process did not answer"))


def test_a_run_without_a_reference_beside_is_not_marked_interleaved() -> None:
    partner, ran = run(8)
    assert ran.beside is None and not ran.timing.interleaved
    assert partner.shares_cores == [False]


def test_both_processes_timed_in_turn_are_told_they_share_their_cores() -> None:
    """So neither polls its channel between calls on the core the other's calls run on."""
    _, _, ref, cand = interleaved_run(8)
    assert ref.shares_cores == [True] and cand.shares_cores == [True]


def test_on_a_device_each_sample_of_either_side_waits_for_the_device_to_be_quiet() -> None:
    """Work one side's process left running would share the device with the other's sample."""
    log, ran, _, _ = interleaved_run(8, quiet=True)
    samples = [who for who, purpose, _, _ in log if purpose == CallPurpose.SAMPLE]
    assert samples[:6] == ["quiet", "reference", "quiet", "candidate", "quiet", "candidate"]
    assert samples.count("quiet") == samples.count("reference") + samples.count("candidate")
    assert ran.beside is not None and "device_quiet" in ran.beside.spent_ms
