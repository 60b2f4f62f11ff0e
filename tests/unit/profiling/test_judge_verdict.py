"""The server's verdict on a timing its judge took (profiling.integrity.judge): every figure is
the judge's interval less the hand-over's own cost, whatever the kernel's process says."""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from profiling import integrity
from profiling.integrity import ImplausibleReport
from shared.protocol import JudgedTiming, TimingReport

HANDOVER_MS = 0.47  # the judge's interval of a null call (H200, a small problem)


def timing(figure_ms: list[float], **extra: Any) -> JudgedTiming:
    """The judge's timing of a call whose samples take ``figure_ms`` beyond the hand-over."""
    base: dict[str, Any] = {"clock": "cuda_events",
                            "trusted_ms": [f + HANDOVER_MS for f in figure_ms],
                            "calibration_ms": [HANDOVER_MS] * 16,
                            "fresh_inputs": len(figure_ms)}
    base.update(extra)
    return JudgedTiming(**base)


def test_the_figure_is_the_judges_interval_less_the_hand_over() -> None:
    verdict = integrity.judge(timing([0.02] * 20), 20, "cuda")
    assert verdict.stats.median == pytest.approx(0.02)
    assert verdict.stats.mean == pytest.approx(0.02)
    assert verdict.stats.method == integrity.JUDGE_METHOD
    assert not verdict.report.suspicious and verdict.clean
    assert verdict.figures["handover_ms"] == pytest.approx(HANDOVER_MS)
    assert verdict.figures["regime"] == "isolated"
    assert any(c.startswith(integrity.JUDGE_CHECK) for c in verdict.report.checks)


def test_what_the_kernels_process_reports_is_shown_and_changes_no_figure() -> None:
    """Its own CUDA-graph and back-to-back figures at a fifth of the truth are its report,
    under kernel_reported, never the figures rankings read."""
    forged = TimingReport(method="fake", event_ms=[], graph_ms_per_call=0.004,
                          back_to_back_ms=0.004)
    plain = integrity.judge(timing([0.02] * 20), 20, "cuda")
    with_claims = integrity.judge(timing([0.02] * 20, kernel_reported=forged), 20, "cuda")
    assert with_claims.stats == plain.stats
    figures = with_claims.figures
    assert figures["cuda_graph_ms"] is None and figures["back_to_back_ms"] is None
    assert figures["kernel_reported"]["cuda_graph_ms"] == pytest.approx(0.004)
    assert "never used" in figures["kernel_reported"]["note"]


def test_the_mean_and_the_median_are_both_of_the_judges_samples() -> None:
    """A process that made half its calls look fast moves neither: each sample is the
    judge's own interval."""
    figures = [0.13] * 20
    verdict = integrity.judge(timing(figures), 20, "cuda")
    assert verdict.stats.mean == pytest.approx(0.13) and verdict.stats.median == pytest.approx(0.13)


def test_null_calls_between_the_samples_may_raise_the_cost_subtracted_only_by_the_allowance(
        ) -> None:
    """A kernel's process that slows the null calls answered after it loaded code gains at
    most the calibration's allowance (twice its standard error, at most 1 us); null calls that
    read less, or more within the allowance, stand for the cost."""
    spread = [HANDOVER_MS + d * 1e-4 for d in range(-8, 8)]  # a calibration 1.6 us wide
    allowance = integrity.null_allowance(spread)
    assert 0 < allowance <= integrity.NULL_ABOVE_MAX_MS
    before = statistics.median(spread)
    slowed = integrity.judge(timing([0.05] * 20, calibration_ms=spread,
                                    null_ms=[HANDOVER_MS + 0.3] * 5), 20, "cuda")
    assert slowed.figures["handover_ms"] == pytest.approx(before + allowance, abs=1e-6)
    assert slowed.figures["handover_allowance_ms"] == pytest.approx(allowance, abs=1e-6)
    assert slowed.figures["handover_between_ms"] == pytest.approx(HANDOVER_MS + 0.3)
    within = integrity.judge(timing([0.05] * 20, calibration_ms=spread,
                                    null_ms=[before + allowance / 2] * 5), 20, "cuda")
    assert within.figures["handover_ms"] == pytest.approx(before + allowance / 2, abs=1e-6)
    faster = integrity.judge(timing([0.05] * 20, null_ms=[HANDOVER_MS - 0.01] * 5), 20, "cuda")
    assert faster.stats.median == pytest.approx(0.06)
    too_few = integrity.judge(timing([0.05] * 20, null_ms=[0.0] * 3), 20, "cuda")
    assert too_few.stats.median == pytest.approx(0.05)


def test_a_calibration_without_spread_allows_nothing_above_it() -> None:
    """Sixteen equal calibration calls: the slowed null calls between the samples count for
    nothing more, the figure is the calibration's."""
    slowed = integrity.judge(timing([0.05] * 20, null_ms=[HANDOVER_MS + 0.3] * 5), 20, "cuda")
    assert slowed.stats.median == pytest.approx(0.05)
    assert slowed.figures["handover_allowance_ms"] == 0.0


def test_a_wide_calibration_allows_at_most_a_microsecond() -> None:
    wide = [HANDOVER_MS + d * 1e-3 for d in range(-8, 8)]  # 16 us wide: noisy, not trusted
    assert integrity.null_allowance(wide) == integrity.NULL_ABOVE_MAX_MS


def test_a_sample_below_the_hand_over_counts_as_zero_never_negative() -> None:
    verdict = integrity.judge(timing([0.0] * 19 + [-0.01]), 20, "cuda")
    assert verdict.stats.min == 0.0


def test_a_spread_reading_is_disturbed_and_not_clean() -> None:
    verdict = integrity.judge(timing([0.1] * 8 + [0.5] * 12), 20, "cuda")
    assert verdict.disturbed and not verdict.clean
    steady = integrity.judge(timing([0.1] * 19 + [0.5]), 20, "cuda")
    assert not steady.disturbed


def test_a_run_cut_short_says_why_and_a_slowing_kernel_is_flagged() -> None:
    cut = "each call ran slower than the last: the last quarter took 3x the first's"
    verdict = integrity.judge(timing([0.1] * 12, cut_short=cut, stopped_by="slowing"), 20,
                              "cuda")
    assert verdict.report.suspicious and not verdict.clean
    assert any("slower than the last" in r for r in verdict.report.reasons)
    assert verdict.figures["stopped_by"] == "slowing" and verdict.figures["cut_short"] == cut
    budget = integrity.judge(timing([0.1] * 3, cut_short="the budget ran out",
                                    stopped_by="budget"), 20, "cuda")
    assert not budget.report.suspicious and not budget.clean


def test_calls_that_wait_for_the_device_from_inside_read_host_synchronised() -> None:
    verdict = integrity.judge(timing([2.0] * 20, released_early=20), 20, "cuda")
    assert verdict.figures["regime"] == "host_synchronised" and verdict.host_bound
    assert any(c.startswith(integrity.HOST_SYNC_CHECK) for c in verdict.report.checks)
    assert not verdict.report.suspicious


def test_the_sample_count_is_checked_against_the_request_unless_the_run_was_cut_short() -> None:
    with pytest.raises(ImplausibleReport, match="20 were asked"):
        integrity.judge(timing([0.1] * 19), 20, "cuda")
    verdict = integrity.judge(timing([0.1] * 19, cut_short="budget", stopped_by="budget"), 20,
                              "cuda")
    assert verdict.stats.num_samples == 19


def test_an_uncalibrated_or_empty_timing_is_implausible() -> None:
    uncalibrated = timing([0.05] * 20)
    uncalibrated.calibration_ms = []
    with pytest.raises(ImplausibleReport, match="calibrated"):
        integrity.judge(uncalibrated, 20, "cuda")
    with pytest.raises(ImplausibleReport, match="no samples"):
        integrity.judge(timing([]), None, "cuda")


def test_on_the_cpu_the_clock_says_so() -> None:
    verdict = integrity.judge(timing([1.0] * 20, clock="perf_counter"), 20, "cpu")
    assert verdict.stats.device == "cpu"
    assert verdict.figures["clock"] == "perf_counter"
    assert any("perf_counter" in c for c in verdict.report.checks)


def test_paired_ratios_divide_each_sides_sample_less_its_own_hand_over_pair_by_pair() -> None:
    reference = timing([3.0, 6.0, 3.0]).model_copy(
        update={"trusted_ms": [3.5, 6.5, 3.5, 9.5], "calibration_ms": [0.5] * 16})
    candidate = timing([1.0, 2.0, 3.0])  # one sample fewer: its run ended a sample early
    paired = integrity.paired_ratios(reference, candidate)
    assert paired is not None
    assert paired.ratios == pytest.approx([3.0, 3.0, 1.0])
    assert paired.median == pytest.approx(3.0)
    assert paired.check().startswith("speedup: the median of 3 per-sample ratios")


def test_a_pair_whose_sample_is_no_more_than_its_hand_over_is_left_out_of_the_ratios() -> None:
    paired = integrity.paired_ratios(timing([2.0, 0.0, 4.0]), timing([1.0, 1.0, 0.0]))
    assert paired is not None and paired.ratios == pytest.approx([2.0])
    assert integrity.paired_ratios(timing([1.0]), timing([0.0])) is None
