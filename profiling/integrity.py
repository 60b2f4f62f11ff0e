"""The server's verdict on a worker's timing report: statistics, cross-check, flags.

Runs in the server, which never imports user code, on the raw samples a worker sent
(:mod:`profiling.timer`). A report that does not fit what was asked for (wrong sample count,
negative or non-finite values, missing fields) is :class:`ImplausibleReport`: the kernel's
runtime error, since only user code can have bent it. When the event figure and an
independent measure of the same calls disagree beyond the tolerance, the result is flagged
and the larger figure is reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from profiling.stats import summarize
from shared.models import IntegrityReport, RuntimeStats, TimingCrossCheck

# The device-activity measure (no L2 flush, back to back) is at most the event figure for
# honest work; beyond this it saw work the events missed.
ACTIVITY_RATIO = 1.15
ACTIVITY_SLACK_MS = 0.005
# Host-synchronised samples include launch overhead, so only a large excess counts.
HOST_RATIO = 2.0
HOST_SLACK_MS = 0.1


class ImplausibleReport(ValueError):
    """A worker's timing report does not fit what it was asked for."""


@dataclass
class TimingVerdict:
    stats: RuntimeStats
    report: IntegrityReport
    event_stats: RuntimeStats | None = None  # the event figure, when another was reported
    extra: dict[str, Any] = field(default_factory=dict)


def assess(raw: Any, requested: int, device: str) -> TimingVerdict:
    """Statistics and integrity of one timing run (raises :class:`ImplausibleReport`)."""
    if not isinstance(raw, dict):
        raise ImplausibleReport("the worker sent no timing report")
    events = _samples(raw.get("event_ms"), "event_ms")
    if len(events) != requested:
        raise ImplausibleReport(
            f"the worker sent {len(events)} timing samples where {requested} were asked for")
    report = IntegrityReport(checks=["timer bound before user code",
                                     "statistics computed by the server"])
    sets = raw.get("input_sets")
    if isinstance(sets, int) and not isinstance(sets, bool):
        if sets >= requested:
            report.checks.append("fresh inputs before every sample")
        elif sets > 1:
            report.checks.append(f"inputs rotated among {sets} fresh sets")
        else:
            report.checks.append("the same inputs for every sample (too large to vary)")
    method = str(raw.get("method", ""))
    if device != "cuda":
        return TimingVerdict(summarize(events, method or "cpu_perf_counter", "cpu"), report)
    stats = summarize(events, method or "cuda_event+l2_flush", "cuda")
    host = _samples(raw.get("host_sync_ms", []), "host_sync_ms")
    busy = raw.get("device_busy_ms")
    report.checks.append("device-wide synchronisation after every sample")
    disagree = False
    if busy is not None:
        busy = _finite(busy, "device_busy_ms")
        report.checks.append("device activity on all streams (CUPTI)")
        limit = stats.median * ACTIVITY_RATIO + ACTIVITY_SLACK_MS
        report.timing = TimingCrossCheck(
            method="device_activity", event_ms=stats.median, independent_ms=busy,
            tolerance=f"independent <= {ACTIVITY_RATIO} x event + {ACTIVITY_SLACK_MS} ms",
        )
        if busy > limit:
            disagree = True
            report.reasons.append(
                f"the GPU was busy {busy:.4g} ms per call on all streams, but the CUDA events "
                f"on the timed stream saw {stats.median:.4g} ms: work ran outside the timed "
                "stream (side streams, other threads) and is now counted")
    else:
        error = raw.get("device_busy_error") or "no device activity was recorded"
        report.suspicious = True
        report.reasons.append(f"the independent device-activity measure failed: {error}")
    if host:
        host_median = summarize(host, "host_sync", "cuda").median
        report.checks.append("device-synchronised host interval")
        if report.timing is None:
            report.timing = TimingCrossCheck(
                method="host_sync", event_ms=stats.median, independent_ms=host_median,
                tolerance=f"independent <= {HOST_RATIO} x event + {HOST_SLACK_MS} ms",
            )
        if host_median > stats.median * HOST_RATIO + HOST_SLACK_MS and not disagree:
            disagree = True
            report.reasons.append(
                f"a device-synchronised host interval took {host_median:.4g} ms per call, "
                f"the CUDA events {stats.median:.4g} ms")
    if not disagree:
        return TimingVerdict(stats, report)
    report.suspicious = True
    honest = _honest_stats(stats, host, busy)
    return TimingVerdict(honest, report, event_stats=stats)


def _honest_stats(stats: RuntimeStats, host: list[float], busy: float | None) -> RuntimeStats:
    """The larger, independent figure, as statistics (host samples where there are some)."""
    if host:
        host_stats = summarize(host, "host_sync (CUDA events disagreed with device activity)",
                               "cuda")
        if busy is None or host_stats.median >= busy:
            return host_stats
    assert busy is not None
    scale = busy / stats.median if stats.median > 0 else 1.0
    scaled = [s * scale for s in (stats.mean, stats.std, stats.min, stats.max, stats.median,
                                  stats.percentile_95, stats.percentile_99)]
    return RuntimeStats(
        mean=scaled[0], std=scaled[1], min=scaled[2], max=scaled[3], median=busy,
        percentile_95=scaled[5], percentile_99=scaled[6], num_samples=stats.num_samples,
        method="device_activity (CUDA events disagreed; event samples scaled to it)",
        device="cuda",
    )


# The server's clock around a timing call must account for what the samples report: the
# custom kernel's call may leave at most this much more unexplained than the reference's
# (same inputs, same sample count, same harness), beyond WALL_SLACK_MS.
WALL_RATIO = 0.5
WALL_SLACK_MS = 25.0


def reported_ms(raw: dict[str, Any]) -> float:
    """The time a timing report says its calls took, all parts together."""
    total = sum(float(v) for v in raw.get("event_ms", []))
    total += sum(float(v) for v in raw.get("host_sync_ms", []))
    busy = raw.get("device_busy_ms")
    if isinstance(busy, (int, float)):
        total += float(busy) * float(raw.get("device_busy_calls", 0) or 0)
    return total + float(raw.get("warmup_ms", 0.0) or 0.0)


def check_wall_clock(report: IntegrityReport, custom_raw: dict[str, Any], custom_wall_ms: float,
                     ref_raw: dict[str, Any], ref_wall_ms: float) -> None:
    """Flag a custom timing report that the server's own clock does not account for.

    The server timed both workers' timing calls. What a call's samples do not cover (input
    refills, flushes, synchronisation) is about the same for the reference and the kernel;
    a kernel whose report is much smaller than its call took had its report shrunk.
    """
    report.checks.append("server wall clock covers the reported samples")
    custom_reported = reported_ms(custom_raw)
    unexplained = (custom_wall_ms - custom_reported) - (ref_wall_ms - reported_ms(ref_raw))
    if unexplained > WALL_RATIO * custom_reported + WALL_SLACK_MS:
        report.suspicious = True
        report.reasons.append(
            f"the kernel's timing call took {custom_wall_ms:.1f} ms on the server's clock but "
            f"its samples account for {custom_reported:.1f} ms ({unexplained:.1f} ms more left "
            "unexplained than the reference's): its timing report was tampered with")


def flag_speedup(report: IntegrityReport | None, speedup: float | None,
                 threshold: float) -> IntegrityReport:
    """Flag a speedup above ``threshold`` for review (KernelBench uses 10x)."""
    report = report or IntegrityReport()
    report.checks.append(f"speedup review above {threshold:g}x")
    if speedup is not None and speedup > threshold:
        report.suspicious = True
        report.reasons.append(
            f"speedup {speedup:.3g}x is above the review threshold {threshold:g}x: "
            "verify the kernel by hand before trusting it")
    return report


def _samples(values: Any, name: str) -> list[float]:
    if not isinstance(values, list):
        raise ImplausibleReport(f"timing field {name} is not a list")
    return [_finite(v, name) for v in values]


def _finite(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ImplausibleReport(f"timing field {name} holds a non-number")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise ImplausibleReport(f"timing field {name} holds {value}")
    return value
