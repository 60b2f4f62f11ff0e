"""The server's verdict on a timing: statistics, cross-checks, flags, figures.

Runs in the server, which never imports user code, on the raw samples it was sent:

- :func:`judge`: a comparison's timings, the reference's and the candidate's alike, taken by
  the judge's own clock (:mod:`judge.clock`): each sample's interval less the hand-over's
  own cost. Every figure published is the judge's;
- :func:`assess`: /evaluate's timing, taken inside the kernel's own process
  (:mod:`harness.timer`: there is no reference, so no judge). The CUDA-event figure is
  cross-checked against independent in-process measures (CUPTI activity on every stream,
  device-synchronised host intervals): when they disagree the result is flagged and the
  larger figure reported.

A report that does not fit what was asked for (wrong sample count, a count outside the
adaptive rule's bounds) is :class:`ImplausibleReport`.
Beside the statistics, :attr:`TimingVerdict.figures` names each figure with its regime and
method (``metadata["timing_figures"]``).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Literal

from profiling.stats import percentile, summarize
from shared.models import IntegrityReport, RuntimeStats, TimingCrossCheck
from shared.protocol import JudgedTiming, TimingReport
from shared.stopping import MAX_SAMPLES, MIN_SAMPLES, TARGET_RSE, median_error, median_rse

# The device-activity measure (no L2 flush, back to back) is at most the event figure for
# honest work; beyond this it saw work the events missed.
ACTIVITY_RATIO = 1.15
ACTIVITY_SLACK_MS = 0.005
# The host interval's own cost (a device synchronisation of an idle GPU: microseconds)
# counts for at most this: a report that claims more gains no more
NULL_HOST_MAX_MS = 0.05
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
# The CUDA events' interval around no work (their own entry and exit on the device: 1.28 us
# on an H100) is subtracted from every event sample, so that a kernel's figure is its work's
# as Nsight Compute's gpu__time_duration counts it. A zero reported above this is not the
# timer's and counts for no more.
EVENT_ZERO_MAX_MS = 0.005


class ImplausibleReport(ValueError):
    """A timing report does not fit what was asked for."""


@dataclass
class TimingVerdict:
    stats: RuntimeStats
    report: IntegrityReport
    event_stats: RuntimeStats | None = None  # the event figure, when another was reported
    host_bound: bool = False  # the host's time per call reported: the GPU's work is less
    # the reading spread as a disturbed one does, or ended early (a reference's is taken again,
    # and never kept)
    disturbed: bool = False
    figures: dict[str, Any] = field(default_factory=dict)  # metadata["timing_figures"]

    def worth_measuring_again(self) -> list[str]:
        """Why a first reading is measured again on a settled device (empty: it stands): its
        flags, or its being host-bound (a host slowed for a moment reads host-bound once; a
        host-bound call reads so every time)."""
        if self.report.suspicious:
            return list(self.report.reasons) or ["flagged"]
        if self.host_bound:
            return [c for c in self.report.checks if c.startswith(HOST_BOUND_CHECK)]
        return []

    @property
    def clean(self) -> bool:
        """Undisturbed: not flagged, not host-bound, not spread as a disturbed reading's (a
        figure fit to be kept and shared)."""
        return not self.report.suspicious and not self.host_bound and not self.disturbed


def assess(raw: TimingReport, requested: int | None, device: str,
           remeasured: str | None = None) -> TimingVerdict:
    """Statistics and integrity of a timing taken inside one process.

    ``requested`` is the request's ``num_trials`` (None: the adaptive rule); ``remeasured``
    the server's note that this is a second reading, and why it took one.
    """
    events = list(raw.event_ms)
    _check_count(raw, events, requested)
    report = _base_report(raw, events, remeasured)
    zero = event_zero(raw.event_zero_ms, report)
    verdict = _assess(raw, [max(0.0, e - zero) for e in events], report, device)
    verdict.figures = _figures(raw, events, verdict, requested)
    verdict.figures["event_zero_ms"] = _rounded(zero)
    return verdict


def event_zero(reported_ms: float, report: IntegrityReport) -> float:
    """The timer's own reading of no work, as subtracted from each sample (ms; at most
    :data:`EVENT_ZERO_MAX_MS`), named among the report's checks."""
    zero = min(reported_ms, EVENT_ZERO_MAX_MS)
    if zero > 0:
        report.checks.append(
            f"the timer's own reading of no work ({zero * 1e3:.3g} us: its events around "
            "nothing, after the warm-up) subtracted from each sample")
    return zero


def _base_report(raw: TimingReport, events: list[float], remeasured: str | None) -> IntegrityReport:
    report = IntegrityReport(checks=["timer bound before user code",
                                     "statistics computed by the server"])
    if remeasured:
        report.checks.append("measured again on a settled device after the first run read: "
                             f"{remeasured[:300]}")
    if raw.fresh_inputs >= len(events) and events:
        report.checks.append("fresh inputs before every sample")
    elif raw.fresh_inputs > 1:
        report.checks.append(f"inputs made afresh for {raw.fresh_inputs} of the samples")
    if raw.inputs_note:
        report.checks.append(raw.inputs_note[:300])
    return report


def _check_count(raw: TimingReport, events: list[float], requested: int | None) -> None:
    if not events:
        raise ImplausibleReport("the timing report holds no samples")
    if requested is not None:
        if len(events) != requested:
            raise ImplausibleReport(
                f"the worker sent {len(events)} timing samples where {requested} were asked for")
        return
    if not MIN_SAMPLES <= len(events) <= MAX_SAMPLES:
        raise ImplausibleReport(
            f"the worker sent {len(events)} timing samples where the adaptive rule takes "
            f"{MIN_SAMPLES} to {MAX_SAMPLES}")
    if raw.stopped_by == "precision" and median_rse(sorted(events)) > TARGET_RSE:
        raise ImplausibleReport(
            "the worker stopped sampling for a precise median, but its samples' median is not "
            f"that precise ({median_rse(sorted(events)):.3%} > {TARGET_RSE:.1%})")
    if len(events) < MAX_SAMPLES and raw.stopped_by not in ("precision", "max_time"):
        raise ImplausibleReport(
            f"the worker stopped adaptive sampling at {len(events)} samples for "
            f"{raw.stopped_by!r}")


def _assess(raw: TimingReport, events: list[float], report: IntegrityReport,
            device: str) -> TimingVerdict:
    method = raw.method
    if device != "cuda":
        return TimingVerdict(summarize(events, method or "cpu_perf_counter", "cpu"), report)
    stats = summarize(events, method or "cuda_event+l2_flush", "cuda")
    host = list(raw.host_sync_ms)
    busy = raw.device_busy_ms
    report.checks.append("device-wide synchronisation after every sample")
    disagree = False
    if busy is not None:
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
            report.suspicious = True
            report.reasons.append(
                f"the device-activity measure (CUPTI) recorded no GPU work for calls the CUDA "
                f"events timed at {stats.median:.4g} ms")
    else:
        error = raw.device_busy_error or "no device activity was recorded"
        report.suspicious = True
        report.reasons.append(f"the independent device-activity measure failed: {error}")
    if host:
        host_median = summarize(host, "host_sync", "cuda").median
        own = min(statistics.median(raw.null_host_ms), NULL_HOST_MAX_MS) \
            if raw.null_host_ms else 0.0
        launch = launch_beyond(raw.enqueue_ms, raw.null_enqueue_ms)
        slack = host_slack_ms(_median_error(host))
        beyond = host_median - own
        report.checks.append(
            f"device-synchronised host interval ({beyond:.4g} ms per call after its own "
            f"{own:.4g} ms" + (f", the launch's {launch:.4g} ms allowed" if launch else "")
            + ")")
        if report.timing is None:
            report.timing = TimingCrossCheck(
                method="host_sync", event_ms=stats.median, independent_ms=beyond,
                tolerance=f"independent <= {HOST_RATIO} x (event + {launch:.4g} ms "
                          f"launch) + {slack:.4g} ms",
            )
        if beyond > host_bound_ms(stats.median, launch, slack) and not disagree:
            if busy is not None and busy >= stats.median * HOST_BOUND_MIN_BUSY_SHARE:
                report.checks.append(
                    f"{HOST_BOUND_CHECK}: a device-synchronised host interval took "
                    f"{beyond:.4g} ms per call, the GPU's work {stats.median:.4g} ms "
                    f"(CUPTI saw {busy:.4g} ms): the host's time per call is reported")
                return TimingVerdict(summarize([max(0.0, h - own) for h in host],
                                               HOST_BOUND_METHOD, "cuda"), report,
                                     event_stats=stats, host_bound=True)
            disagree = True
            report.reasons.append(
                f"a device-synchronised host interval took {host_median:.4g} ms per call, "
                f"the CUDA events {stats.median:.4g} ms")
    if not disagree:
        return TimingVerdict(stats, report)
    report.suspicious = True
    return TimingVerdict(_honest_stats(stats, host, busy), report, event_stats=stats)


# ---- the in-process host-bound rule (/evaluate) ----------------------------------------------

# A device-synchronised host interval, less its own cost, beyond HOST_RATIO x (the event
# figure + the call's launch) + a slack is the host's time per call: the call is host-bound.
# The launch is the host's time enqueueing the call while its stream was held, beyond a call
# of no work's (at most HOST_LAUNCH_MS); the slack at least HOST_SLACK_MS, or three standard
# errors of the host interval's median, at most HOST_SLACK_MAX_MS.
HOST_RATIO = 1.10
HOST_LAUNCH_MS = 0.15
HOST_SLACK_MS = 0.04
HOST_SLACK_MAX_MS = 0.1
HOST_SPREAD_FACTOR = 3.0


def launch_beyond(own: list[float], harness: list[float]) -> float:
    """The call's own launch (``own``) beyond a call of no work's (``harness``), capped at
    HOST_LAUNCH_MS; 0 without both."""
    if not own or not harness:
        return 0.0
    extra = statistics.median(own) - statistics.median(harness)
    return min(max(extra, 0.0), HOST_LAUNCH_MS)


def host_slack_ms(spread_error_ms: float) -> float:
    return max(HOST_SLACK_MS, min(HOST_SPREAD_FACTOR * spread_error_ms, HOST_SLACK_MAX_MS))


def host_bound_ms(figure_ms: float, launch_ms: float, slack_ms: float) -> float:
    """The most a host interval beyond its own cost may read for a call whose event figure is
    ``figure_ms`` before the call counts as host-bound."""
    return (figure_ms + launch_ms) * HOST_RATIO + slack_ms


# ---- a comparison's timings, on the judge's clock --------------------------------------------

# Null calls between the samples stand for the hand-over's cost where there are at least this
# many of them: the same pairing, arena and state as the samples (a judge's calibration may
# be kept from an earlier pairing, and the cost drifts by a microsecond between pairings).
# They are answered by a process that loaded the kernel, which could slow them to shorten
# every sample's figure: so they count for at most the calibration's figure (taken before any
# kernel code was loaded) plus twice its standard error, and never more than NULL_ABOVE_MAX_MS
# above it. That allowance is what a kernel slowing its null calls can gain.
NULLS_AFTER_MIN = 4
NULL_ABOVE_MAX_MS = 0.001
# A figure whose median exceeds its 10th percentile by this ratio, and by this slack, was
# disturbed while it was taken (on a GPU the hand-over's interval varies by a microsecond or
# two; on the CPU the host's scheduling moves a small call's by tens of microseconds, and a
# disturbed reference read 7.0 ms where its undisturbed samples read 2.9): a reference figure
# such as that is measured again, and never kept for later comparisons
DISTURBED_RATIO = {"cuda": 1.15, "cpu": 1.5}
DISTURBED_SLACK_MS = {"cuda": 0.002, "cpu": 0.2}
JUDGE_CHECK = "every figure is the judge's own"
JUDGE_METHOD = ("judge_clock (the judge's own clock from before the inputs reached the kernel's "
                "process until the outputs were in the judge's memory, less the hand-over's "
                "own cost)")
CLOCKS = {"cuda_events": "two CUDA events on the judge's stream; the processes hand over on "
                         "the GPU, so no host round trip falls inside",
          "perf_counter": "the judge's perf_counter; both processes spin on shared memory"}


def null_cost(timing: JudgedTiming) -> tuple[float, float, float | None]:
    """(the hand-over's cost subtracted from each sample, the calibration's, the null calls'
    between the samples or None), ms (see NULLS_AFTER_MIN)."""
    before = statistics.median(timing.calibration_ms)
    if len(timing.null_ms) < NULLS_AFTER_MIN:
        return before, before, None
    after = statistics.median(timing.null_ms)
    return min(after, before + null_allowance(timing.calibration_ms)), before, after


def null_allowance(calibration_ms: list[float]) -> float:
    """How far above the calibration's median the null calls between the samples may set the
    cost subtracted: twice that median's standard error, at most NULL_ABOVE_MAX_MS."""
    error = median_error(sorted(calibration_ms))
    return min(NULL_ABOVE_MAX_MS, 2 * error) if math.isfinite(error) else 0.0


def disturbed(net: list[float], kind: str) -> bool:
    """Whether ``net`` samples spread as a disturbed reading's do (see DISTURBED_RATIO)."""
    ordered = sorted(net)
    low, middle = percentile(ordered, 10), statistics.median(ordered)
    return middle > DISTURBED_RATIO[kind] * low and middle - low > DISTURBED_SLACK_MS[kind]


def judge(timing: JudgedTiming, requested: int | None, device: str,
          remeasured: str | None = None) -> TimingVerdict:
    """Statistics and integrity of a timing the judge took (a candidate's or the reference's).

    Every figure is the judge's: each sample's interval less the hand-over's own cost. What
    the kernel's process reported about itself (``kernel_reported``) is shown beside, as its
    own report, and changes nothing here."""
    kind: Literal["cuda", "cpu"] = "cuda" if device == "cuda" else "cpu"
    trusted = list(timing.trusted_ms)
    if not trusted:
        raise ImplausibleReport("the judge's timing holds no samples")
    if not timing.calibration_ms:
        raise ImplausibleReport("the judge's clock was not calibrated")
    if requested is not None and len(trusted) != requested and timing.cut_short is None:
        raise ImplausibleReport(
            f"the judge sent {len(trusted)} timing samples where {requested} were asked for")
    null, before, after = null_cost(timing)
    allowance = null_allowance(timing.calibration_ms)
    net = [max(0.0, t - null) for t in trusted]
    stats = summarize(net, JUDGE_METHOD, kind)
    report = IntegrityReport(checks=[
        "statistics computed by the server",
        f"{JUDGE_CHECK}: {CLOCKS[timing.clock]}",
        "inputs written into the kernel's reach only after the judge's clock started",
        (f"the hand-over's own cost ({null:.4g} ms per call: the null call's, with the same "
         "inputs and outputs, between the samples, held to at most "
         f"{allowance * 1e3:.2g} us above its figure from before "
         "the kernel's code was loaded) subtracted from each sample")])
    if remeasured:
        report.checks.append(f"measured again after the first reading: {remeasured[:300]}")
    if timing.fresh_inputs >= len(trusted):
        report.checks.append("fresh inputs before every sample")
    if timing.interleaved:
        report.checks.append(INTERLEAVED_CHECK)
    if timing.inputs_note:
        report.checks.append(timing.inputs_note[:300])
    regime = "isolated"
    if timing.released_early * 2 > len(trusted):
        regime = "host_synchronised"
        report.checks.append(
            f"{HOST_SYNC_CHECK}: {timing.released_early} of {len(trusted)} calls waited for "
            "the device from inside before they were enqueued whole, so the judge's clock ran "
            "while the host enqueued them: their figure holds the host's time")
    if timing.cut_short:
        report.reasons.append(f"the timing ended early: {timing.cut_short}")
        report.suspicious = "slower than the last" in timing.cut_short
    verdict = TimingVerdict(stats, report, host_bound=regime != "isolated",
                            disturbed=disturbed(net, kind) or timing.cut_short is not None)
    verdict.figures = _judged_figures(timing, net, stats, regime, requested)
    verdict.figures.update(handover_ms=_rounded(null), handover_before_ms=_rounded(before),
                           handover_between_ms=_rounded(after) if after is not None else None,
                           handover_allowance_ms=_rounded(allowance))
    return verdict


HOST_SYNC_CHECK = "host-synchronised"
INTERLEAVED_CHECK = (
    "timed beside the comparison's other side, a sample of each in turn on the same inputs "
    "(the reference's calls are host-bound, and the host's speed, which moves from one second "
    "to the next, meets both alike)")


PAIRED_STATISTIC = "median_of_paired_ratios"
# A host-bound reference's reading beside the candidate above this multiple of its own reading
# is flagged: honest references have read up to 1.56x their own reading beside identical
# candidates (KernelBench's level-3 RNNs on an H200; bench/results/README.md, "Identity
# compares")
BESIDE_SLOWED_RATIO = 2.0


@dataclass(frozen=True)
class PairedRatios:
    """A comparison whose two sides were timed in turn (:mod:`judge.beside`): each sample's
    ratio of the reference's interval to the candidate's, each less its own hand-over's
    cost. Two samples of one pair met the host within a call of each other; their ratios'
    median is the speedup, where the ratio of the two sides' medians would follow how each
    side's samples fell between the host's fast and slow stretches."""

    ratios: list[float]
    # the reference's median beside the candidate, and in its own reading (taken before the
    # candidate's code existed): where the first is far above the second, the candidate's
    # process may have slowed the reference's samples (a thread on the core they share, GPU
    # work left running past its own call's end)
    beside_ms: float | None = None
    own_ms: float | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.ratios)

    def slowed(self) -> str | None:
        """Why the reference's samples beside the candidate look slowed by it, or None."""
        if self.beside_ms is None or not self.own_ms or \
                self.beside_ms <= BESIDE_SLOWED_RATIO * self.own_ms:
            return None
        return (f"the reference's samples taken in turn with the candidate's read "
                f"{self.beside_ms / self.own_ms:.3g}x its own reading, taken before the "
                f"candidate's code existed ({self.beside_ms:.4g} ms against "
                f"{self.own_ms:.4g} ms): the candidate's process may have slowed them")

    def check(self) -> str:
        ordered = sorted(self.ratios)
        return (f"speedup: the median of {len(ordered)} per-sample ratios, reference over "
                f"candidate, their samples taken in turn (interquartile "
                f"{percentile(ordered, 25):.3g}-{percentile(ordered, 75):.3g})")


def paired_ratios(reference: JudgedTiming, candidate: JudgedTiming) -> PairedRatios | None:
    """The ratios of two interleaved timings' samples, pair by pair (None: no pair of
    positive figures); the shorter run's count where one side's run ended a sample early."""
    ref_null, cand_null = null_cost(reference)[0], null_cost(candidate)[0]
    ratios = [(r - ref_null) / (c - cand_null)
              for r, c in zip(reference.trusted_ms, candidate.trusted_ms)
              if c - cand_null > 0 and r - ref_null > 0]
    return PairedRatios(ratios) if ratios else None


def _judged_figures(timing: JudgedTiming, net: list[float], stats: RuntimeStats, regime: str,
                    requested: int | None) -> dict[str, Any]:
    own = timing.kernel_reported
    not_judged = ("not measured by the judge (the kernel's process's own figure, if it took "
                  "one, is under kernel_reported)")
    return {
        "regime": regime,
        "method": stats.method,
        "clock": timing.clock,
        "isolated_median_ms": stats.median,
        "back_to_back_ms": None,
        "back_to_back_calls": 0,
        "back_to_back_reason": not_judged,
        "cuda_graph_ms": None,
        "cuda_graph_calls": 0,
        "cuda_graph_reason": not_judged,
        "samples": len(net),
        "warm_up_ms": _rounded(timing.warmup_ms),
        "warm_up_reason": timing.warmup_reason,
        "sample_rule": "adaptive" if requested is None else "fixed",
        "stopped_by": timing.stopped_by if timing.stopped_by in STOPPED_BY | CUT else "count",
        "cut_short": timing.cut_short,
        "median_rse": _rounded(median_rse(sorted(net))),
        "spent_ms": {part: round(ms, 3) for part, ms in timing.spent_ms.items()},
        "kernel_reported": _kernel_reported(own, timing.warmup_calls),
    }


CUT = {"budget", "slowing"}


def _kernel_reported(own: TimingReport | None, warm_up_calls: int) -> dict[str, Any]:
    """The kernel's process's own figures: a diagnostic, never the number."""
    return {
        "note": "measured inside the kernel's process, which the kernel owns: shown, never "
                "used for runtime, speedup or rankings",
        "warm_up_calls": warm_up_calls,
        "back_to_back_ms": own.back_to_back_ms if own is not None else None,
        "back_to_back_reason": own.back_to_back_reason if own is not None else None,
        "cuda_graph_ms": own.graph_ms_per_call if own is not None else None,
        "cuda_graph_reason": own.graph_reason if own is not None else None,
    }


def _median_error(values: list[float]) -> float:
    """The standard error of ``values``' median, from their interquartile range (robust to
    the odd preempted call); 0 for fewer than 4 values."""
    ordered = sorted(values)
    if len(ordered) < 4:
        return 0.0
    sigma = (percentile(ordered, 75) - percentile(ordered, 25)) / 1.349
    return math.sqrt(math.pi / 2) * sigma / math.sqrt(len(ordered))


def _figures(raw: TimingReport, events: list[float], verdict: TimingVerdict,
             requested: int | None) -> dict[str, Any]:
    """Each figure named with its regime and method; null with the reason when absent."""
    stats = verdict.stats
    b2b, b2b_reason = raw.back_to_back_ms, raw.back_to_back_reason
    graph, graph_reason = raw.graph_ms_per_call, raw.graph_reason
    if b2b is None and b2b_reason is None:
        b2b_reason = "not measured"
    if graph is None and graph_reason is None:
        graph_reason = "not measured"
    if verdict.event_stats is not None and not verdict.host_bound:
        withheld = ("withheld: the CUDA events disagreed with an independent measure, so "
                    "figures taken with them are not reported")
        b2b, b2b_reason = (None, withheld) if b2b is not None else (b2b, b2b_reason)
        graph, graph_reason = (None, withheld) if graph is not None else (graph, graph_reason)
    busy = raw.device_busy_ms
    if graph is not None and busy is not None \
            and graph < busy * GRAPH_MIN_BUSY_RATIO - GRAPH_SLACK_MS:
        graph, graph_reason = None, (
            f"withheld: the CUDA graph ran {graph:.4g} ms per call where the call keeps the GPU "
            f"busy {busy:.4g} ms: the call does work a graph does not capture "
            "(work on another stream such as the legacy default stream, or on the host)")
    return {
        # the regime of runtime_stats: one call after an L2 flush, or (host-bound) the host's
        # time per call, device-synchronised
        "regime": "host_bound" if verdict.host_bound else "isolated",
        "method": stats.method,
        "isolated_median_ms": stats.median,
        "back_to_back_ms": b2b,
        "back_to_back_calls": raw.back_to_back_calls if b2b is not None else 0,
        "back_to_back_method": "N calls with no pause and no L2 flush between two CUDA events, "
                               "divided by N; median of rounds" if stats.device == "cuda"
                               else "N calls between two perf_counter reads, divided by N; "
                                    "median of rounds",
        "back_to_back_reason": b2b_reason,
        "cuda_graph_ms": graph,
        "cuda_graph_calls": raw.graph_calls_per_replay if graph is not None else 0,
        "cuda_graph_method": "N calls captured in one CUDA graph, replayed between two CUDA "
                             "events, divided by N (no L2 flush between calls); median of replays",
        "cuda_graph_reason": graph_reason,
        "samples": len(events),
        "warm_up_calls": raw.warmup_calls,
        "warm_up_reason": raw.warmup_reason,
        "sample_rule": "adaptive" if requested is None else "fixed",
        "stopped_by": raw.stopped_by if raw.stopped_by in STOPPED_BY else "count",
        "median_rse": _rounded(median_rse(sorted(events))),
        # the job's wall time by part of the timing run (the cost of the measure, not of the
        # kernel): warm-up, samples, the figures beside them, the judge's own steps
        "spent_ms": {part: round(ms, 3) for part, ms in raw.spent_ms.items()},
    }


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
