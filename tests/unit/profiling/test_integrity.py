"""The server's verdict on a timing taken inside one process (profiling.integrity.assess)."""

from __future__ import annotations

import pydantic
import pytest

from profiling import integrity
from shared import stopping
from shared.protocol import TimingReport


def cuda_report(event_ms: list[float], busy: float | None, host: list[float] | None = None,
                **extra: object) -> TimingReport:
    report = {"method": "cuda_event+l2_flush", "event_ms": event_ms,
              "host_sync_ms": host if host is not None else [e + 0.01 for e in event_ms[:5]],
              "device_busy_ms": busy, "warmup_ms": 1.0}
    report.update(extra)
    return TimingReport.model_validate(report)


def test_honest_report_is_not_suspicious_and_reports_the_event_median() -> None:
    verdict = integrity.assess(cuda_report([0.3, 0.31, 0.32, 0.3], busy=0.29), 4, "cuda")
    assert not verdict.report.suspicious
    assert verdict.stats.median == pytest.approx(0.305)
    assert verdict.report.timing is not None and verdict.report.timing.method == "device_activity"


def test_work_outside_the_timed_stream_is_flagged_and_the_larger_figure_reported() -> None:
    # events saw 1 us; the device was busy 0.34 ms per call on another stream
    verdict = integrity.assess(cuda_report([0.001] * 10, busy=0.34, host=[0.36] * 10), 10, "cuda")
    assert verdict.report.suspicious
    assert "outside the timed stream" in verdict.report.reasons[0]
    assert verdict.stats.median >= 0.34
    assert verdict.event_stats is not None and verdict.event_stats.median == pytest.approx(0.001)


def test_a_missing_activity_trace_is_suspicious() -> None:
    verdict = integrity.assess(cuda_report([0.2] * 3, busy=None, device_busy_error="disabled"), 3, "cuda")
    assert verdict.report.suspicious and "disabled" in verdict.report.reasons[0]


def test_host_interval_catches_hidden_work_when_activity_is_unavailable() -> None:
    verdict = integrity.assess(cuda_report([0.001] * 5, busy=None, host=[2.0] * 5), 5, "cuda")
    assert verdict.report.suspicious and verdict.stats.median == pytest.approx(2.0)


@pytest.mark.parametrize("raw", [
    {"event_ms": "fast"}, {"event_ms": [0.1, float("nan")]}, {"event_ms": [0.1, -1.0]},
    {"event_ms": [0.1], "surprise": 1},
])
def test_malformed_reports_are_refused_as_messages(raw: dict) -> None:
    """A worker's reply that carries such a report is a protocol violation, never a figure."""
    with pytest.raises(pydantic.ValidationError):
        TimingReport.model_validate({"method": "cpu_perf_counter", **raw})


def test_a_report_with_fewer_samples_than_asked_is_implausible() -> None:
    with pytest.raises(integrity.ImplausibleReport, match="3 timing samples where 100"):
        integrity.assess(TimingReport(method="cpu_perf_counter", event_ms=[0.1, 0.1, 0.1]),
                         100, "cpu")


def test_speedup_above_the_review_threshold_is_flagged_not_rejected() -> None:
    report = integrity.flag_speedup(None, 28.8, 10.0)
    assert report.suspicious and "28.8x" in report.reasons[0]
    assert not integrity.flag_speedup(None, 3.0, 10.0).suspicious


# ---- adaptive sample counts (requested=None) and the named figures


def steady(n: int, ms: float = 0.3) -> list[float]:
    return [ms + 0.0001 * (i % 3) for i in range(n)]


def adaptive_report(event_ms: list[float], stopped_by: str = "precision",
                    **extra: object) -> TimingReport:
    fields: dict = {"sample_rule": "adaptive", "stopped_by": stopped_by,
                    "sampling_ms": len(event_ms) * 0.8, **extra}
    return cuda_report(event_ms, busy=event_ms[0] * 0.9, **fields)


@pytest.mark.parametrize("n", [stopping.MIN_SAMPLES, 137, stopping.MAX_SAMPLES])
def test_an_adaptive_count_within_the_bounds_is_plausible(n: int) -> None:
    stopped_by = "max_samples" if n == stopping.MAX_SAMPLES else "precision"
    verdict = integrity.assess(adaptive_report(steady(n), stopped_by), None, "cuda")
    assert verdict.stats.num_samples == n
    assert verdict.figures["samples"] == n and verdict.figures["sample_rule"] == "adaptive"
    assert verdict.figures["stopped_by"] == stopped_by
    assert verdict.figures["median_rse"] is not None and verdict.figures["median_rse"] <= 0.005


@pytest.mark.parametrize("n", [stopping.MIN_SAMPLES - 1, stopping.MAX_SAMPLES + 1])
def test_an_adaptive_count_outside_the_bounds_is_implausible(n: int) -> None:
    with pytest.raises(integrity.ImplausibleReport, match=r"adaptive rule takes 20 to 1000"):
        integrity.assess(adaptive_report(steady(n)), None, "cuda")


def test_an_adaptive_stop_for_precision_the_samples_do_not_have_is_implausible() -> None:
    noisy = [0.1 * (1 + i % 10) for i in range(40)]  # a median known to +-20%, not 0.5%
    with pytest.raises(integrity.ImplausibleReport, match="not that precise"):
        integrity.assess(adaptive_report(noisy, "precision"), None, "cuda")
    assert integrity.assess(adaptive_report(noisy, "max_time"), None, "cuda").stats.num_samples == 40


def test_an_adaptive_run_that_stopped_early_for_no_reason_is_implausible() -> None:
    with pytest.raises(integrity.ImplausibleReport, match="stopped adaptive sampling at 30"):
        integrity.assess(adaptive_report(steady(30), "count"), None, "cuda")


def test_a_fixed_count_is_still_checked_exactly() -> None:
    raw = adaptive_report(steady(30), "count")
    raw.sample_rule = "fixed"
    assert integrity.assess(raw, 30, "cuda").figures["sample_rule"] == "fixed"
    with pytest.raises(integrity.ImplausibleReport, match="30 timing samples where 31"):
        integrity.assess(raw, 31, "cuda")


def graph_fields(ms: float | None, reason: str | None = None, calls: int = 200) -> dict:
    return {"graph_ms_per_call": ms, "graph_calls_per_replay": calls if ms is not None else 0,
            "graph_replay_ms": [ms * calls] * 10 if ms is not None else [], "graph_reason": reason}


def b2b_fields(ms: float | None, reason: str | None = None, calls: int = 50) -> dict:
    return {"back_to_back_ms": ms, "back_to_back_calls": calls if ms is not None else 0,
            "back_to_back_round_ms": [ms * calls] * 5 if ms is not None else [],
            "back_to_back_reason": reason}


def test_the_graph_figure_of_a_short_kernel_is_passed_through_beside_the_event_median() -> None:
    raw = cuda_report([0.006] * 20, busy=0.0045, **graph_fields(0.0047),
                      **b2b_fields(None, "not measured: the median 0.006 ms is under 1 ms"))
    figures = integrity.assess(raw, 20, "cuda").figures
    assert figures["regime"] == "isolated" and figures["method"] == "cuda_event+l2_flush"
    assert figures["isolated_median_ms"] == pytest.approx(0.006)
    assert figures["cuda_graph_ms"] == pytest.approx(0.0047) and figures["cuda_graph_calls"] == 200
    assert figures["cuda_graph_reason"] is None and "CUDA graph" in figures["cuda_graph_method"]
    assert figures["back_to_back_ms"] is None
    assert figures["back_to_back_reason"] == "not measured: the median 0.006 ms is under 1 ms"


def test_the_back_to_back_figure_of_a_long_kernel_is_passed_through() -> None:
    raw = cuda_report([1.6] * 20, busy=1.55, **b2b_fields(1.75),
                      **graph_fields(None, "not measured: the median 1.6 ms is not under 0.1 ms"))
    figures = integrity.assess(raw, 20, "cuda").figures
    assert figures["back_to_back_ms"] == pytest.approx(1.75) and figures["back_to_back_calls"] == 50
    assert figures["back_to_back_reason"] is None
    assert figures["cuda_graph_ms"] is None and "not under 0.1 ms" in figures["cuda_graph_reason"]


def test_a_failed_capture_is_null_with_the_reason() -> None:
    reason = "the call cannot be captured in a CUDA graph (...): RuntimeError: operation not permitted"
    figures = integrity.assess(cuda_report([0.01] * 5, busy=0.008, **graph_fields(None, reason)),
                               5, "cuda").figures
    assert figures["cuda_graph_ms"] is None and figures["cuda_graph_reason"] == reason


def test_a_graph_that_holds_less_work_than_the_call_is_withheld() -> None:
    raw = cuda_report([0.05] * 5, busy=0.05, **graph_fields(0.002))  # the graph lost the work
    figures = integrity.assess(raw, 5, "cuda").figures
    assert figures["cuda_graph_ms"] is None and "does not capture" in figures["cuda_graph_reason"]


def test_figures_taken_with_events_that_disagreed_are_withheld() -> None:
    raw = cuda_report([0.001] * 10, busy=0.34, host=[0.36] * 10, **graph_fields(0.0009))
    verdict = integrity.assess(raw, 10, "cuda")
    assert verdict.report.suspicious
    assert verdict.figures["cuda_graph_ms"] is None
    assert "disagreed" in verdict.figures["cuda_graph_reason"]
    assert verdict.figures["isolated_median_ms"] == pytest.approx(verdict.stats.median)


def test_a_report_without_figures_says_so() -> None:
    figures = integrity.assess(cuda_report([0.2] * 3, busy=0.2), 3, "cuda").figures
    assert figures["cuda_graph_ms"] is None and figures["back_to_back_ms"] is None
    assert figures["cuda_graph_reason"] == "not measured"


@pytest.mark.parametrize("bad", [
    {"graph_ms_per_call": "fast"}, {"graph_ms_per_call": -1.0}, {"back_to_back_ms": float("inf")},
    {"graph_ms_per_call": 0.1, "graph_replay_ms": ["x"]}, {"back_to_back_ms": None,
                                                            "back_to_back_reason": 42},
    {"graph_ms_per_call": 0.1, "graph_calls_per_replay": -3},
])
def test_malformed_figures_are_refused_as_messages(bad: dict) -> None:
    with pytest.raises(pydantic.ValidationError):
        cuda_report([0.2] * 3, busy=0.2, **bad)


def test_a_host_bound_call_whose_gpu_work_cupti_saw_reports_the_hosts_time_unflagged() -> None:
    """Two streams joined, four small ops: 21 us of GPU work, 0.17 ms of the host's time per
    call (seen on the H100). The host's time is the call's cost; nothing is hidden."""
    verdict = integrity.assess(cuda_report([0.021] * 10, busy=0.020, host=[0.17] * 10), 10,
                               "cuda")
    assert not verdict.report.suspicious, verdict.report.reasons
    assert verdict.stats.median == pytest.approx(0.17)
    assert verdict.stats.method.startswith("host_sync (host-bound")
    assert verdict.event_stats is not None and verdict.event_stats.median == pytest.approx(0.021)
    assert any(c.startswith("host-bound") for c in verdict.report.checks)
    assert verdict.figures["regime"] == "host_bound"


@pytest.mark.parametrize("busy", [0.0, None], ids=["cupti-saw-nothing", "cupti-unavailable"])
def test_the_same_host_excess_is_flagged_where_cupti_did_not_see_the_gpu_work(
        busy: float | None) -> None:
    verdict = integrity.assess(cuda_report([0.021] * 10, busy=busy, host=[0.17] * 10), 10,
                               "cuda")
    assert verdict.report.suspicious
    assert any("host interval" in r for r in verdict.report.reasons)
    assert verdict.stats.median == pytest.approx(0.17)


def test_cupti_recording_nothing_for_calls_the_events_timed_is_flagged_not_agreement() -> None:
    verdict = integrity.assess(cuda_report([0.05] * 10, busy=0.0, host=[0.06] * 10), 10, "cuda")
    assert verdict.report.suspicious
    assert "recorded no GPU work" in verdict.report.reasons[0]
    # a call with no GPU work at all (a view, say): the events see only their own overhead
    quiet = integrity.assess(cuda_report([0.002] * 10, busy=0.0, host=[0.02] * 10), 10, "cuda")
    assert not quiet.report.suspicious


def test_the_timers_reading_of_no_work_is_subtracted_from_every_sample() -> None:
    verdict = integrity.assess(cuda_report([0.030, 0.031, 0.030], busy=0.027,
                                           event_zero_ms=0.00128), 3, "cuda")
    assert verdict.stats.median == pytest.approx(0.030 - 0.00128)
    assert verdict.stats.min == pytest.approx(0.030 - 0.00128)
    assert verdict.figures["event_zero_ms"] == pytest.approx(0.00128)
    assert any("reading of no work" in check for check in verdict.report.checks)


def test_a_reported_zero_beyond_the_timers_counts_for_no_more_than_the_cap() -> None:
    """A process that rewrote its zero to half its samples gains the cap, not half."""
    verdict = integrity.assess(cuda_report([2.0] * 4, busy=1.99, event_zero_ms=1.0), 4, "cuda")
    assert verdict.stats.median == pytest.approx(2.0 - integrity.EVENT_ZERO_MAX_MS)
    assert verdict.figures["event_zero_ms"] == pytest.approx(integrity.EVENT_ZERO_MAX_MS)


def test_without_a_zero_the_samples_are_reported_as_taken() -> None:
    verdict = integrity.assess(cuda_report([0.3] * 4, busy=0.29), 4, "cuda")
    assert verdict.stats.median == pytest.approx(0.3)
    assert not any("reading of no work" in check for check in verdict.report.checks)


# The H100 call of docs/WORKER_DESIGN.md (eleventh session): a 128^2 fp16 matmul's reference,
# 8 us on the GPU, 0.1235 ms of device-synchronised host interval, about 0.1 ms of it the
# host's launch (Python and the framework's dispatch).
SMALL_EVENTS, SMALL_HOST, SMALL_LAUNCH, NO_WORK_ENQUEUE, NO_WORK_HOST = (
    0.008, 0.1235, 0.11, 0.01, 0.006)


def small_call(launch_ms: float = SMALL_LAUNCH, host_ms: float = SMALL_HOST,
               **extra: object) -> TimingReport:
    figures: dict[str, object] = {"enqueue_ms": [launch_ms] * 20,
                                  "null_enqueue_ms": [NO_WORK_ENQUEUE] * 11,
                                  "null_host_ms": [NO_WORK_HOST] * 10}
    return cuda_report([SMALL_EVENTS] * 20, busy=0.0075, host=[host_ms] * 10,
                       **{**figures, **extra})


def test_a_host_interval_its_events_and_launch_explain_is_not_host_bound_in_process() -> None:
    """2 x events + 0.1 ms read it host-bound (0.1235 > 0.116): the reference at 15x its
    candidates, whose judge allows the launch. The judge's rule, applied here, does not."""
    verdict = integrity.assess(small_call(), 20, "cuda")
    assert not verdict.host_bound and not verdict.report.suspicious, verdict.report.checks
    assert verdict.stats.median == pytest.approx(SMALL_EVENTS)
    assert any(c.startswith("device-synchronised host interval (0.1175 ms per call after its "
                            "own 0.006 ms, the launch's 0.1 ms allowed)")
               for c in verdict.report.checks), verdict.report.checks


def test_the_launch_allowed_in_process_is_capped() -> None:
    """A launch reported at 0.5 ms counts for HOST_LAUNCH_MS: a 0.4 ms host interval
    around 8 us of GPU work is host-bound, and reported less the interval's own cost."""
    verdict = integrity.assess(small_call(launch_ms=0.5, host_ms=0.40), 20, "cuda")
    assert verdict.host_bound and not verdict.report.suspicious
    assert verdict.stats.median == pytest.approx(0.40 - NO_WORK_HOST)
    assert any(c.startswith("host-bound") for c in verdict.report.checks)


def test_without_launch_figures_no_launch_is_allowed() -> None:
    verdict = integrity.assess(small_call(enqueue_ms=[], null_enqueue_ms=[]), 20, "cuda")
    assert verdict.host_bound


def test_a_host_intervals_own_cost_reported_beyond_the_cap_counts_for_the_cap() -> None:
    """Where CUPTI is blind, the host interval is what catches hidden work: a report that
    claims its no-work interval costs 10 ms to hide 10 ms gains the cap only."""
    verdict = integrity.assess(cuda_report([0.021] * 10, busy=None, host=[10.0] * 10,
                                           null_host_ms=[10.0] * 10), 10, "cuda")
    assert verdict.report.suspicious
    assert any("host interval" in r for r in verdict.report.reasons)
