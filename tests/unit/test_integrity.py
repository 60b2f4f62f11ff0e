"""The server's verdict on a worker's raw timing report (profiling.integrity)."""

from __future__ import annotations

import pytest

from profiling import integrity


def cuda_report(event_ms: list[float], busy: float | None, host: list[float] | None = None,
                **extra: object) -> dict:
    report = {"method": "cuda_event+l2_flush", "event_ms": event_ms,
              "host_sync_ms": host if host is not None else [e + 0.01 for e in event_ms[:5]],
              "device_busy_ms": busy, "warmup_ms": 1.0}
    report.update(extra)
    return report


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
    None, {"event_ms": "fast"}, {"event_ms": [0.1, float("nan")]}, {"event_ms": [0.1, -1.0]},
    {"event_ms": [True, 0.1]},
])
def test_malformed_reports_are_implausible(raw: object) -> None:
    with pytest.raises(integrity.ImplausibleReport):
        integrity.assess(raw, 2, "cpu")


def test_a_report_with_fewer_samples_than_asked_is_implausible() -> None:
    with pytest.raises(integrity.ImplausibleReport, match="3 timing samples where 100"):
        integrity.assess({"event_ms": [0.1, 0.1, 0.1]}, 100, "cpu")


def test_speedup_above_the_review_threshold_is_flagged_not_rejected() -> None:
    report = integrity.flag_speedup(None, 28.8, 10.0)
    assert report.suspicious and "28.8x" in report.reasons[0]
    assert not integrity.flag_speedup(None, 3.0, 10.0).suspicious
