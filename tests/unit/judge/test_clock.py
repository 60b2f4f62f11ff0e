"""The judge's timing run (judge.clock.time_candidate) against a fake kernel's process: null
calls between the samples, the launch each call reports, all of it in the raw run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from harness.timer import Timer
from judge import clock
from judge.clock import NullCalls, time_candidate
from shared.protocol import (
    CallDone,
    CallPurpose,
    ExtraFigures,
    Extras,
    TimingReport,
    WarmedUp,
)
from tests.unit.judge.cpu_judge import vector_slots


@dataclass
class FakePartner:
    """Answers like a kernel's process: a sample reports 0.5 ms of events and 0.08 ms of
    launch, a null call 0.01 ms of each."""

    calls: list[tuple[CallPurpose, int]] = field(default_factory=list)
    quick_warm_ups: list[bool] = field(default_factory=list)

    def warm_up(self, quick: bool = False) -> WarmedUp:
        self.quick_warm_ups.append(quick)
        return WarmedUp(calls=3, ms=1.5)

    def call(self, purpose: CallPurpose, index: int, hold_ms: float = 0.0) -> CallDone:
        self.calls.append((purpose, index))
        sample = purpose == CallPurpose.SAMPLE
        return CallDone(index=index, outputs=[], copied=True,
                        event_ms=0.5 if sample else 0.01,
                        enqueue_ms=0.08 if sample else 0.01)

    def extras(self, message: Extras) -> ExtraFigures:
        return ExtraFigures(report=TimingReport(method="fake", event_ms=[]))


def run(samples: int | None) -> tuple[FakePartner, Any]:
    partner = FakePartner()
    calibration = NullCalls(trusted=[0.2] * 16, events=[0.01] * 16, enqueue=[0.01] * 16,
                            hold_ms=0.01)
    ran = time_candidate(partner, vector_slots(4), Timer(),  # type: ignore[arg-type]
                         lambda i: [torch.full((4,), float(i))], lambda i, values: [[0] for _ in values],
                         samples, calibration)
    return partner, ran


def test_a_null_call_follows_every_second_sample() -> None:
    partner, ran = run(10)
    purposes = [p for p, _ in partner.calls]
    assert purposes.count(CallPurpose.SAMPLE) == 10
    assert purposes.count(CallPurpose.CALIBRATE) == 10 // clock.NULL_EVERY
    # a null call comes right after each second sample, never two in a row
    for i, (purpose, _) in enumerate(partner.calls):
        if purpose == CallPurpose.CALIBRATE:
            assert partner.calls[i - 1][0] == CallPurpose.SAMPLE
            assert partner.calls[i - 2][0] == CallPurpose.SAMPLE
    timing = ran.timing
    assert len(timing.null_ms) == len(timing.null_event_ms) == 10 // clock.NULL_EVERY
    assert timing.null_enqueue_ms == [0.01] * (10 // clock.NULL_EVERY)


def test_null_calls_thin_out_after_a_dozen_so_a_long_run_pays_for_few() -> None:
    partner, _ = run(100)
    purposes = [p for p, _ in partner.calls]
    assert purposes.count(CallPurpose.SAMPLE) == 100
    # every second sample up to 12 null calls (24 samples), then every eighth: 12 + 9
    assert purposes.count(CallPurpose.CALIBRATE) == clock.NULLS_DENSE + (100 - 24) // 8
    nulls_after = [i for i in range(100) if clock.null_after(i)]
    assert nulls_after[:clock.NULLS_DENSE] == list(range(1, 24, 2))
    assert nulls_after[clock.NULLS_DENSE:] == list(range(31, 100, 8))


def test_the_run_says_where_its_time_went() -> None:
    _, ran = run(6)
    spent = ran.timing.kernel.spent_ms
    assert {"warm_up", "inputs", "samples", "nulls", "keep", "handover"} <= set(spent)
    assert all(ms >= 0.0 for ms in spent.values())


def test_the_raw_run_carries_each_samples_launch_and_the_calibration() -> None:
    _, ran = run(6)
    timing = ran.timing
    assert timing.kernel.event_ms == [0.5] * 6
    assert timing.enqueue_ms == [0.08] * 6
    assert len(timing.trusted_ms) == 6
    assert timing.calibration_ms == [0.2] * 16 and timing.calibration_event_ms == [0.01] * 16
    # the audit never keeps a null call's outputs: only the samples were offered
    assert ran.kept.seen == 6


def test_a_request_for_fewer_samples_than_the_minimum_gets_a_short_warm_up_and_says_so() -> None:
    partner, ran = run(1)
    assert partner.quick_warm_ups == [True]
    reason = ran.timing.kernel.warmup_reason
    assert reason is not None and "fixed 1 samples" in reason


def test_an_adaptive_run_gets_the_whole_warm_up() -> None:
    partner, ran = run(None)
    assert partner.quick_warm_ups == [False]
    assert ran.timing.kernel.warmup_reason is None
