"""The server's verdict on a candidate timed by its judge (profiling.integrity.judge): the
kernel's own figure where the judge's clock agrees with it, the judge's where it does not."""

from __future__ import annotations

import pytest

from profiling import integrity
from profiling.integrity import ImplausibleReport
from shared.protocol import JudgedTiming, TimingReport

NULL_MS = 0.2


def timing(event_ms: list[float], trusted_ms: list[float] | None = None,
           host_ms: list[float] | None = None, calibration: list[float] | None = None,
           ) -> JudgedTiming:
    report = TimingReport(method="cuda_event+l2_flush", event_ms=event_ms,
                          host_sync_ms=host_ms or [], fresh_inputs=len(event_ms))
    return JudgedTiming(kernel=report,
                        trusted_ms=trusted_ms or [e + NULL_MS for e in event_ms],
                        calibration_ms=calibration or [NULL_MS] * 20)


def test_an_honest_kernel_whose_events_the_judges_clock_confirms_reports_its_events() -> None:
    verdict = integrity.judge(timing([0.050] * 20, [0.050 + NULL_MS + 0.004] * 20), 20, "cuda")
    assert not verdict.report.suspicious and not verdict.host_bound
    assert verdict.stats.median == pytest.approx(0.050)
    assert verdict.report.timing is not None and verdict.report.timing.method == "judge_clock"
    assert verdict.figures["judge_ms"] == pytest.approx(0.054)
    assert verdict.figures["judge_null_call_ms"] == pytest.approx(NULL_MS)


def test_work_hidden_from_the_kernels_own_figures_is_flagged_and_the_judges_figure_reported(
        ) -> None:
    """Events rebound to read a quarter, and a host interval that agrees with them: the
    judge's clock says 1 ms per call, and that is what is reported."""
    verdict = integrity.judge(timing([0.25] * 20, [1.0 + NULL_MS] * 20, host_ms=[0.27] * 10),
                              20, "cuda")
    assert verdict.report.suspicious
    assert verdict.stats.median == pytest.approx(1.0)
    assert verdict.stats.method.startswith("judge_clock")
    assert "judge's clock read" in verdict.report.reasons[0]
    assert verdict.event_stats is not None and verdict.event_stats.median == pytest.approx(0.25)
    assert verdict.figures["back_to_back_ms"] is None  # figures taken with the events withheld


def test_a_host_bound_call_that_its_own_host_interval_explains_is_reported_unflagged() -> None:
    """Many small launches: the GPU is busy 0.02 ms per call, the host takes 0.3 ms; the
    judge reads the same 0.3 ms, so the excess is the host's, not hidden work."""
    verdict = integrity.judge(timing([0.02] * 20, [0.30 + NULL_MS] * 20, host_ms=[0.29] * 10),
                              20, "cuda")
    assert not verdict.report.suspicious and verdict.host_bound
    assert verdict.stats.median == pytest.approx(0.30)
    assert verdict.figures["regime"] == "host_bound"
    assert verdict.worth_measuring_again()  # a host slowed once reads host-bound once


def test_the_slack_grows_with_the_spread_of_the_null_calls() -> None:
    quiet = [NULL_MS] * 20
    noisy = [NULL_MS - 0.1, NULL_MS + 0.1] * 10
    excess = [0.050 + NULL_MS + 0.06] * 20  # 60 us beyond the events
    assert integrity.judge(timing([0.050] * 20, excess, calibration=quiet), 20,
                           "cuda").report.suspicious
    assert not integrity.judge(timing([0.050] * 20, excess, calibration=noisy), 20,
                               "cuda").report.suspicious


def test_the_slack_is_the_error_of_the_null_calls_median_not_their_spread() -> None:
    """A busy 2-core host: the null calls' cost outside the kernel's process spreads over
    2 ms. The judge subtracts their median, whose error over 16 calls is a quarter of that,
    so a timer scaled to 60% (15.5 ms read, 26 ms judged) is still caught."""
    busy = [2.5 - 1.0, 2.5 + 1.0] * 8
    cheat = timing([15.5] * 20, [26.3 + 2.5] * 20, calibration=busy)
    verdict = integrity.judge(cheat, 20, "cpu")
    assert verdict.report.suspicious
    assert verdict.report.timing is not None
    # 3 x 1.2533 x 2/1.349/4 (the samples' interval less events does not spread)
    assert "1.3 x (event + 0 ms launch) + 1.394 ms" in verdict.report.timing.tolerance


def with_nulls(base: JudgedTiming, null_ms: list[float], enqueue_ms: list[float] | None = None,
               null_enqueue_ms: list[float] | None = None) -> JudgedTiming:
    base.null_ms = null_ms
    base.enqueue_ms = enqueue_ms or []
    base.null_enqueue_ms = null_enqueue_ms or []
    return base


def test_a_tiny_honest_kernel_whose_round_trips_ran_slower_than_the_null_calls_keeps_its_events(
        ) -> None:
    """Seen on the H100: a 3 us relu whose samples' round trips took 0.027 ms more than the
    null calls', beyond its 0.028 ms launch, with quiet null calls; it was reported host-bound
    at 0.061 ms, twenty times its GPU time, though its own host interval showed no more than
    its launch."""
    relu = with_nulls(timing([0.003] * 20, [0.003 + NULL_MS + 0.058] * 20,
                             host_ms=[0.0316] * 10),
                      [NULL_MS] * 10, enqueue_ms=[0.033] * 20, null_enqueue_ms=[0.005] * 10)
    verdict = integrity.judge(relu, 20, "cuda")
    assert not verdict.report.suspicious and not verdict.host_bound
    assert verdict.stats.median == pytest.approx(0.003)


def test_null_calls_between_the_samples_take_the_state_the_samples_meet() -> None:
    """After loading the kernel every round trip costs 0.12 ms more (its process's state):
    the null calls between the samples read that too, so an honest kernel is not flagged."""
    drifted = timing([0.050] * 20, [0.050 + NULL_MS + 0.12] * 20)
    assert integrity.judge(drifted, 20, "cuda").report.suspicious  # the calibration alone
    verdict = integrity.judge(with_nulls(drifted, [NULL_MS + 0.12] * 10), 20, "cuda")
    assert not verdict.report.suspicious
    assert verdict.figures["judge_null_call_ms"] == pytest.approx(NULL_MS + 0.12)
    assert verdict.figures["judge_null_call_before_ms"] == pytest.approx(NULL_MS)
    # too few null calls between the samples (a few samples asked for): the calibration's
    few = integrity.judge(with_nulls(timing([0.050] * 5, [0.050 + NULL_MS] * 5),
                                     [NULL_MS - 0.1] * 2), 5, "cuda")
    assert few.figures["judge_null_call_ms"] == pytest.approx(NULL_MS)
    assert not few.report.suspicious


def test_null_calls_the_kernels_process_slows_count_only_up_to_the_drift_allowance() -> None:
    """A kernel that hides 1 ms of work and slows the null calls after loading by as much
    gains only JUDGE_DRIFT_MS: it is flagged, and the judge's figure is reported."""
    cheat = with_nulls(timing([0.050] * 20, [1.05 + NULL_MS] * 20), [NULL_MS + 1.0] * 10)
    verdict = integrity.judge(cheat, 20, "cuda")
    assert verdict.report.suspicious
    drift = integrity.JUDGE_DRIFT_MS["cuda"]
    assert verdict.figures["judge_null_call_ms"] == pytest.approx(NULL_MS + drift)
    assert verdict.stats.median == pytest.approx(1.05 - drift)


def test_the_calls_own_launch_is_allowed_up_to_the_launch_allowance() -> None:
    """The stream is held while the host enqueues the call, so the host's launch (0.08 ms
    here, beyond the null call's) is inside the judge's interval and not in the events."""
    launched = timing([0.010] * 20, [0.010 + 0.08 + NULL_MS] * 20)
    assert integrity.judge(launched, 20, "cuda").report.suspicious  # no launch reported
    verdict = integrity.judge(with_nulls(launched, [], [0.11] * 20, [0.03] * 10), 20, "cuda")
    assert not verdict.report.suspicious
    assert verdict.figures["judge_launch_ms"] == pytest.approx(0.08)
    # a launch reported longer than the allowance counts only up to it
    hidden = timing([0.010] * 20, [0.010 + 0.6 + NULL_MS] * 20)
    verdict = integrity.judge(with_nulls(hidden, [], [0.63] * 20, [0.03] * 10), 20, "cuda")
    assert verdict.report.suspicious
    assert verdict.figures["judge_launch_ms"] == pytest.approx(integrity.JUDGE_LAUNCH_MS["cuda"])


def test_hidden_work_that_varies_from_call_to_call_does_not_widen_the_band_past_its_cap(
        ) -> None:
    """0.2 or 1.0 ms of hidden work in turn: the spread of interval less events is wide, but
    the slack it gives stops at JUDGE_SLACK_MAX_MS, and the median's 0.6 ms is caught."""
    hidden = [0.050 + NULL_MS + extra for extra in (0.2, 1.0) * 10]
    hidden[0] = 0.050 + NULL_MS + 0.6
    verdict = integrity.judge(timing([0.050] * 20, hidden), 20, "cuda")
    assert verdict.report.suspicious
    assert verdict.figures["judge_slack_ms"] == pytest.approx(integrity.JUDGE_SLACK_MAX_MS["cuda"])


def test_a_judges_clock_that_does_not_pair_with_the_samples_is_implausible() -> None:
    broken = timing([0.05] * 20)
    broken.trusted_ms = broken.trusted_ms[:5]
    with pytest.raises(ImplausibleReport, match="pair up"):
        integrity.judge(broken, 20, "cuda")
    uncalibrated = timing([0.05] * 20)
    uncalibrated.calibration_ms = []
    with pytest.raises(ImplausibleReport, match="calibrated"):
        integrity.judge(uncalibrated, 20, "cuda")


def test_the_sample_count_is_checked_against_the_request() -> None:
    with pytest.raises(ImplausibleReport, match="asked for"):
        integrity.judge(timing([0.05] * 19), 20, "cuda")


def held(base: JudgedTiming, hold_ms: float, lasted_ms: float, reported_ms: float
         ) -> JudgedTiming:
    """``base`` with null calls asked to hold the device ``hold_ms``: the calibration's hold
    it and say so; the ten later ones hold it ``lasted_ms`` and report ``reported_ms``."""
    base.null_hold_ms = hold_ms
    base.calibration_ms = [c + hold_ms for c in base.calibration_ms]
    base.calibration_event_ms = [hold_ms] * len(base.calibration_ms)
    base.null_ms = [NULL_MS + lasted_ms] * 10
    base.null_event_ms = [reported_ms] * 10
    return base


def test_null_calls_reported_shorter_than_their_hold_count_as_the_hold() -> None:
    """The kernel's process scales every figure it reports to 25%, the null calls' too: read
    as reported, a 0.35 ms hold would move 0.26 ms into the null call's cost outside the
    process and off every sample. Held to the judge's hold, the hidden work shows."""
    hold = 0.35
    cheat = held(timing([0.35 * 0.25] * 20, [0.35 + NULL_MS] * 20), hold, hold, hold * 0.25)
    verdict = integrity.judge(cheat, 20, "cuda")
    assert verdict.report.suspicious
    assert verdict.figures["judge_null_call_ms"] == pytest.approx(NULL_MS, abs=0.01)
    assert verdict.stats.median == pytest.approx(0.35, abs=0.01)
    # an honest harness reports its hold (longer at a lower clock): nothing changes
    honest = held(timing([0.35] * 20, [0.35 + NULL_MS] * 20), hold, hold * 1.2, hold * 1.2)
    verdict = integrity.judge(honest, 20, "cuda")
    assert not verdict.report.suspicious
    assert verdict.stats.median == pytest.approx(0.35)


def test_a_harness_that_cannot_hold_the_device_reads_its_null_calls_as_they_are() -> None:
    """No GPU sleep in this build: the calibration's null calls read ~0 however long the
    hold asked, and so do the later ones; no floor applies."""
    base = timing([0.05] * 20, [0.05 + NULL_MS] * 20)
    base.null_hold_ms = 0.35
    base.calibration_event_ms = [0.001] * len(base.calibration_ms)
    base.null_ms, base.null_event_ms = [NULL_MS] * 10, [0.001] * 10
    verdict = integrity.judge(base, 20, "cuda")
    assert not verdict.report.suspicious
    assert verdict.figures["judge_null_call_ms"] == pytest.approx(NULL_MS - 0.001, abs=1e-4)


def recalibrated(t: JudgedTiming, again_ms: float) -> JudgedTiming:
    """``t`` measured again after the calibration was taken again (at ``again_ms`` per null
    call): the first calibration kept beside it."""
    return t.model_copy(update={"first_calibration_ms": t.calibration_ms,
                                "calibration_ms": [again_ms] * 20})


def test_a_reading_taken_again_is_judged_against_the_calibration_taken_again() -> None:
    """The host slowed by 0.3 ms per call after the first calibration (its null calls and
    the samples alike): against the first calibration an honest 5 us kernel is flagged;
    against a calibration taken again in the state the samples meet, it is not."""
    slow = 0.3
    honest = with_nulls(timing([0.005] * 20, [0.005 + NULL_MS + slow] * 20),
                        [NULL_MS + slow] * 10)
    assert integrity.judge(honest, 20, "cuda").report.suspicious
    verdict = integrity.judge(recalibrated(honest, NULL_MS + slow - 0.12), 20, "cuda")
    assert not verdict.report.suspicious
    assert verdict.stats.median == pytest.approx(0.005)
    assert verdict.figures["judge_null_call_before_ms"] == pytest.approx(NULL_MS + slow - 0.12)


def test_a_calibration_taken_again_counts_at_most_the_drift_allowance_above_the_first() -> None:
    """A kernel that hides 1 ms per call, slows its null calls by as much, and kept work
    queued on the device through the recalibration to slow that too: taken as read, the
    second calibration would cover the hidden work; it counts only up to the first's plus
    JUDGE_DRIFT_MS, so the hidden work is caught."""
    drift = integrity.JUDGE_DRIFT_MS["cuda"]
    cheat = with_nulls(timing([0.050] * 20, [1.05 + NULL_MS] * 20), [NULL_MS + 1.0] * 10)
    verdict = integrity.judge(recalibrated(cheat, NULL_MS + 1.0), 20, "cuda")
    assert verdict.report.suspicious
    assert verdict.figures["judge_null_call_before_ms"] == pytest.approx(NULL_MS + drift)
    assert verdict.figures["judge_null_call_ms"] == pytest.approx(NULL_MS + 2 * drift)


def test_a_large_problems_null_calls_may_rise_by_a_share_of_their_cost() -> None:
    """A 1.6 GB output: the null call costs 4 ms (the hand-over's copies), and after loading
    it read 0.35 ms more (the samples alike): within JUDGE_DRIFT_SHARE of its cost, so an
    honest 1 ms kernel is not flagged; a rise of 1 ms still counts only up to that share."""
    big = 4.0
    honest = with_nulls(timing([1.0] * 20, [1.0 + big + 0.35] * 20, calibration=[big] * 20),
                        [big + 0.35] * 10)
    verdict = integrity.judge(honest, 20, "cuda")
    assert not verdict.report.suspicious
    assert verdict.figures["judge_null_call_ms"] == pytest.approx(big + 0.35)
    slowed = with_nulls(timing([1.0] * 20, [1.0 + big + 1.0] * 20, calibration=[big] * 20),
                        [big + 1.0] * 10)
    verdict = integrity.judge(slowed, 20, "cuda")
    assert verdict.report.suspicious
    assert verdict.figures["judge_null_call_ms"] == pytest.approx(
        big * (1 + integrity.JUDGE_DRIFT_SHARE))


def test_the_judges_own_zero_is_subtracted_not_the_one_the_kernels_process_reported() -> None:
    judged = timing([0.030] * 20, [0.030 + NULL_MS + 0.002] * 20)
    judged.kernel.event_zero_ms = 0.004  # the kernel's process's claim: ignored
    judged.event_zero_ms = 0.00128
    verdict = integrity.judge(judged, 20, "cuda")
    assert not verdict.report.suspicious
    assert verdict.stats.median == pytest.approx(0.030 - 0.00128)
    assert verdict.figures["event_zero_ms"] == pytest.approx(0.00128)


def test_null_calls_beyond_the_drift_allowance_mark_the_reading_disturbed() -> None:
    moved = timing([0.030] * 20, [0.030 + NULL_MS + 0.003] * 20)
    moved.null_ms = [NULL_MS + integrity.JUDGE_DRIFT_MS["cuda"] + 0.05] * 8
    calm = timing([0.030] * 20, [0.030 + NULL_MS + 0.003] * 20)
    calm.null_ms = [NULL_MS + 0.01] * 8
    assert integrity.judge(moved, 20, "cuda").disturbed
    assert any("host's state moved" in c for c in integrity.judge(moved, 20, "cuda").report.checks)
    assert not integrity.judge(calm, 20, "cuda").disturbed
