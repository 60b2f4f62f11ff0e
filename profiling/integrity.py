"""The server's verdict on a worker's timing report: statistics, cross-check, flags, figures.

Runs in the server, which never imports user code, on the raw samples a worker sent
(:mod:`profiling.timer`). A report that does not fit what was asked for (wrong sample count,
a count outside the adaptive rule's bounds, negative or non-finite values, missing fields) is
:class:`ImplausibleReport`: the kernel's runtime error, since only user code can have bent it.
When the event figure and an independent measure of the same calls disagree beyond the
tolerance, the result is flagged and the larger figure is reported.

Beside the statistics, :attr:`TimingVerdict.figures` names each figure with its regime and
method (``metadata["timing_figures"]`` of a result): the isolated event median, the
back-to-back figure of long kernels and the CUDA-graph figure of short ones, each null with
a reason when it was not measured or cannot be trusted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from profiling.stats import summarize
from profiling.stopping import MAX_SAMPLES, MIN_SAMPLES, TARGET_RSE, median_rse
from profiling.timer import rest_after_warm_up_s
from shared.models import IntegrityReport, RuntimeStats, TimingCrossCheck

# The device-activity measure (no L2 flush, back to back) is at most the event figure for
# honest work; beyond this it saw work the events missed.
ACTIVITY_RATIO = 1.15
ACTIVITY_SLACK_MS = 0.005
# Host-synchronised samples include launch overhead, so only a large excess counts.
HOST_RATIO = 2.0
HOST_SLACK_MS = 0.1
# A call whose host interval is beyond that while CUPTI saw at least this share of the event
# figure as GPU work is host-bound: the GPU's work is accounted for, the host's time per call
# is the call's cost (reported, not flagged). With CUPTI blind to it (nothing recorded, or
# unavailable) the same excess may be work hidden from both device measures: flagged.
HOST_BOUND_MIN_BUSY_SHARE = 0.25
HOST_BOUND_METHOD = "host_sync (host-bound: the host's time per call exceeds the GPU's work)"
HOST_BOUND_CHECK = "host-bound"
# A CUDA graph replays the call's GPU work without launch gaps; at less than this share of the
# call's device-busy time it lost work the call does (another stream, the host).
GRAPH_MIN_BUSY_RATIO = 0.5
GRAPH_SLACK_MS = 0.001
STOPPED_BY = {"count", "precision", "max_samples", "max_time"}


class ImplausibleReport(ValueError):
    """A worker's timing report does not fit what it was asked for."""


@dataclass
class TimingVerdict:
    stats: RuntimeStats
    report: IntegrityReport
    event_stats: RuntimeStats | None = None  # the event figure, when another was reported
    host_bound: bool = False  # the host's time per call reported: the GPU's work is less
    extra: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)  # metadata["timing_figures"]

    def worth_measuring_again(self) -> list[str]:
        """Why a first reading is measured again on a settled GPU (empty: it stands): its
        flags, or its being host-bound (a host slowed for a moment reads host-bound once; a
        host-bound call reads so every time)."""
        if self.report.suspicious:
            return list(self.report.reasons) or ["flagged"]
        if self.host_bound:
            return [c for c in self.report.checks if c.startswith(HOST_BOUND_CHECK)]
        return []


def assess(raw: Any, requested: int | None, device: str) -> TimingVerdict:
    """Statistics and integrity of one timing run (raises :class:`ImplausibleReport`).

    ``requested`` is the request's ``num_trials``; None means the adaptive stopping rule
    (:mod:`profiling.stopping`), whose count may be anything within its bounds.
    """
    if not isinstance(raw, dict):
        raise ImplausibleReport("the worker sent no timing report")
    events = _samples(raw.get("event_ms"), "event_ms")
    _check_count(raw, events, requested)
    report = IntegrityReport(checks=["timer bound before user code",
                                     "statistics computed by the server"])
    if raw.get("remeasured"):  # set by the server (LocalExecutor._time), never by a worker
        report.checks.append("measured again on a settled GPU after the first run read: "
                             f"{str(raw['remeasured'])[:300]}")
    verdict = _assess(raw, events, report, device)
    verdict.figures = _figures(raw, events, verdict, requested)
    return verdict


def _check_count(raw: dict[str, Any], events: list[float], requested: int | None) -> None:
    if requested is not None:
        if len(events) != requested:
            raise ImplausibleReport(
                f"the worker sent {len(events)} timing samples where {requested} were asked for")
        return
    if not MIN_SAMPLES <= len(events) <= MAX_SAMPLES:
        raise ImplausibleReport(
            f"the worker sent {len(events)} timing samples where the adaptive rule takes "
            f"{MIN_SAMPLES} to {MAX_SAMPLES}")
    stopped_by = raw.get("stopped_by")
    if stopped_by == "precision" and median_rse(sorted(events)) > TARGET_RSE:
        raise ImplausibleReport(
            "the worker stopped sampling for a precise median, but its samples' median is not "
            f"that precise ({median_rse(sorted(events)):.3%} > {TARGET_RSE:.1%})")
    if len(events) < MAX_SAMPLES and stopped_by not in ("precision", "max_time"):
        raise ImplausibleReport(
            f"the worker stopped adaptive sampling at {len(events)} samples for {stopped_by!r}")


def _assess(raw: dict[str, Any], events: list[float], report: IntegrityReport,
            device: str) -> TimingVerdict:
    sets = raw.get("input_sets")
    if isinstance(sets, int) and not isinstance(sets, bool):
        if sets >= len(events):
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
        elif busy == 0 and stats.median > ACTIVITY_SLACK_MS:
            # blind, not in agreement: CUPTI switched off from inside the process, say
            report.suspicious = True
            report.reasons.append(
                f"the device-activity measure (CUPTI) recorded no GPU work for calls the CUDA "
                f"events timed at {stats.median:.4g} ms")
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
            if busy is not None and busy >= stats.median * HOST_BOUND_MIN_BUSY_SHARE:
                report.checks.append(
                    f"{HOST_BOUND_CHECK}: a device-synchronised host interval took {host_median:.4g} ms "
                    f"per call, the GPU's work {stats.median:.4g} ms (CUPTI saw {busy:.4g} ms): "
                    "the host's time per call is reported")
                return TimingVerdict(summarize(host, HOST_BOUND_METHOD, "cuda"), report,
                                     event_stats=stats, host_bound=True)
            disagree = True
            report.reasons.append(
                f"a device-synchronised host interval took {host_median:.4g} ms per call, "
                f"the CUDA events {stats.median:.4g} ms")
    if not disagree:
        return TimingVerdict(stats, report)
    report.suspicious = True
    honest = _honest_stats(stats, host, busy)
    return TimingVerdict(honest, report, event_stats=stats)


def _figures(raw: dict[str, Any], events: list[float], verdict: TimingVerdict,
             requested: int | None) -> dict[str, Any]:
    """Each figure named with its regime and method; null with the reason when absent."""
    stats = verdict.stats
    b2b, b2b_reason = _figure(raw, "back_to_back_ms", "back_to_back_reason",
                              "back_to_back_round_ms", "back_to_back_calls")
    graph, graph_reason = _figure(raw, "graph_ms_per_call", "graph_reason", "graph_replay_ms",
                                  "graph_calls_per_replay")
    if verdict.event_stats is not None and not verdict.host_bound:
        withheld = ("withheld: the CUDA events disagreed with an independent measure, so "
                    "figures taken with them are not reported")
        b2b, b2b_reason = (None, withheld) if b2b is not None else (b2b, b2b_reason)
        graph, graph_reason = (None, withheld) if graph is not None else (graph, graph_reason)
    busy = raw.get("device_busy_ms")
    if graph is not None and isinstance(busy, (int, float)) and not isinstance(busy, bool) \
            and graph < busy * GRAPH_MIN_BUSY_RATIO - GRAPH_SLACK_MS:
        graph, graph_reason = None, (
            f"withheld: the CUDA graph ran {graph:.4g} ms per call where the call keeps the GPU "
            f"busy {float(busy):.4g} ms: the call does work a graph does not capture "
            "(work on another stream such as the legacy default stream, or on the host)")
    stopped_by = raw.get("stopped_by")
    return {
        # the regime of runtime_stats: one call after an L2 flush, or (host-bound) the host's
        # time per call, device-synchronised
        "regime": "host_bound" if verdict.host_bound else "isolated",
        "method": stats.method,
        "isolated_median_ms": stats.median,
        "back_to_back_ms": b2b,
        "back_to_back_calls": _count(raw, "back_to_back_calls") if b2b is not None else 0,
        "back_to_back_method": "N calls with no pause and no L2 flush between two CUDA events, "
                               "divided by N; median of rounds" if verdict.stats.device == "cuda"
                               else "N calls between two perf_counter reads, divided by N; "
                                    "median of rounds",
        "back_to_back_reason": b2b_reason,
        "cuda_graph_ms": graph,
        "cuda_graph_calls": _count(raw, "graph_calls_per_replay") if graph is not None else 0,
        "cuda_graph_method": "N calls captured in one CUDA graph, replayed between two CUDA "
                             "events, divided by N (no L2 flush between calls); median of replays",
        "cuda_graph_reason": graph_reason,
        "samples": len(events),
        "sample_rule": "adaptive" if requested is None else "fixed",
        "stopped_by": stopped_by if stopped_by in STOPPED_BY else "count",
        "median_rse": _rounded(median_rse(sorted(events))),
    }


def _figure(raw: dict[str, Any], key: str, reason_key: str, parts_key: str,
            count_key: str) -> tuple[float | None, str | None]:
    """A worker's secondary figure, checked: (value, None) or (None, why it is absent)."""
    if key not in raw:
        return None, "not in this timing report"
    _samples(raw.get(parts_key, []), parts_key)
    _count(raw, count_key)
    value = raw[key]
    if value is None:
        reason = raw.get(reason_key)
        if reason is not None and not isinstance(reason, str):
            raise ImplausibleReport(f"timing field {reason_key} is not text")
        return None, (reason or "not measured")[:500]
    return _finite(value, key), None


def _count(raw: dict[str, Any], key: str) -> int:
    value = raw.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ImplausibleReport(f"timing field {key} is not a count")
    return value


def _rounded(value: float) -> float | None:
    return round(value, 6) if math.isfinite(value) else None


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
    total += sum(float(v) for v in raw.get("back_to_back_round_ms", []) or [])
    total += sum(float(v) for v in raw.get("graph_replay_ms", []) or [])
    busy = raw.get("device_busy_ms")
    if isinstance(busy, (int, float)):
        total += float(busy) * float(raw.get("device_busy_calls", 0) or 0)
    return total + float(raw.get("warmup_ms", 0.0) or 0.0)


def check_wall_clock(report: IntegrityReport, custom_raw: dict[str, Any], custom_wall_ms: float,
                     ref_raw: dict[str, Any], ref_wall_ms: float) -> None:
    """Flag a custom timing report that the server's own clock does not account for.

    The server timed both workers' timing calls. What a call's samples do not cover (input
    refills, flushes, synchronisation) is about the same per sample for the reference and the
    kernel; a kernel whose report is much smaller than its call took had its report shrunk.
    When adaptive sampling took more samples of the kernel, the reference's own overhead per
    sample (its sampling loop's time less its samples, from the checker) covers the extra ones.
    """
    report.checks.append("server wall clock covers the reported samples")
    custom_reported = reported_ms(custom_raw)
    extra = len(custom_raw.get("event_ms", [])) - len(ref_raw.get("event_ms", []))
    allowance = max(0, extra) * _overhead_per_sample_ms(ref_raw, ref_wall_ms)
    unexplained = ((custom_wall_ms - custom_reported) - (ref_wall_ms - reported_ms(ref_raw))
                   - allowance - max(0.0, rest_ms(custom_raw) - rest_ms(ref_raw)))
    if unexplained > WALL_RATIO * custom_reported + WALL_SLACK_MS:
        report.suspicious = True
        report.reasons.append(
            f"the kernel's timing call took {custom_wall_ms:.1f} ms on the server's clock but "
            f"its samples account for {custom_reported:.1f} ms ({unexplained:.1f} ms more left "
            "unexplained than the reference's): its timing report was tampered with")


def rest_ms(raw: dict[str, Any]) -> float:
    """The idle time the timer's rule gives a call between its warm-up and its samples (a
    kernel of a millisecond and more, :func:`profiling.timer.rest_after_warm_up_s`), from the
    report's warm-up: a fixed amount, whatever the report claims beside it."""
    calls = raw.get("warmup_calls")
    spent = raw.get("warmup_ms")
    if not isinstance(calls, int) or isinstance(calls, bool) or calls <= 0 \
            or not isinstance(spent, (int, float)) or isinstance(spent, bool):
        return 0.0
    return rest_after_warm_up_s(float(spent) / calls) * 1e3


def _overhead_per_sample_ms(raw: dict[str, Any], wall_ms: float) -> float:
    """The time a sampling loop spent per sample outside the samples (flush, sync, refill)."""
    events = raw.get("event_ms", [])
    if not events:
        return 0.0
    sampling = raw.get("sampling_ms")
    if isinstance(sampling, (int, float)) and not isinstance(sampling, bool):
        spent = float(sampling) - sum(float(v) for v in events)
    else:  # an older report: all that the call does not account for, per sample
        spent = wall_ms - reported_ms(raw)
    return max(0.0, spent / len(events))


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
