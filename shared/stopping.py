"""When to stop taking timing samples: a fixed count, or until the median is precise enough.

Pure Python, shared by the worker's timer (:mod:`profiling.timer`), which applies the rule as
it samples, and the server (:mod:`profiling.integrity`), which checks a report against its
bounds and states the precision it reached.

The adaptive rule (a request without ``num_trials``): take samples until there are at least
:data:`MIN_SAMPLES` and :data:`MIN_TIME_S` of sampling has passed, then stop as soon as the
relative standard error of the median is at most :data:`TARGET_RSE`; stop in any case at
:data:`MAX_SAMPLES`, or at :data:`MAX_TIME_S` once :data:`MIN_SAMPLES` are in. Time is the
sampling loop's own clock (flushes and synchronisation included), so a short kernel is not
held to thousands of samples.
"""

from __future__ import annotations

import math
from bisect import insort
from collections.abc import Callable, Sequence
from dataclasses import dataclass

MIN_SAMPLES = 20
MAX_SAMPLES = 1000
MIN_TIME_S = 0.05
MAX_TIME_S = 2.0
TARGET_RSE = 0.005
# Ranks of the distribution-free 95% interval of the median are n/2 -/+ Z*sqrt(n)/2.
Z = 1.96


@dataclass(frozen=True)
class StoppingRule:
    """Bounds of one sampling run; ``fixed(n)`` is the degenerate rule of a given count."""

    min_samples: int = MIN_SAMPLES
    max_samples: int = MAX_SAMPLES
    min_time_s: float = MIN_TIME_S
    max_time_s: float = MAX_TIME_S
    target_rse: float = TARGET_RSE
    # the median is also precise enough once its standard error is at most this (ms): a
    # microsecond kernel's figure need not be known to 0.5% of itself
    floor_ms: float = 0.0

    @classmethod
    def fixed(cls, count: int) -> StoppingRule:
        return cls(min_samples=count, max_samples=count, min_time_s=0.0,
                   max_time_s=float("inf"), target_rse=0.0)

    @classmethod
    def for_request(cls, num_trials: int | None, floor_ms: float = 0.0) -> StoppingRule:
        """The rule a request asks for: its ``num_trials``, or adaptive when it gave none."""
        return cls(floor_ms=floor_ms) if num_trials is None else cls.fixed(num_trials)

    @property
    def adaptive(self) -> bool:
        return self.min_samples != self.max_samples


def median_rse(ordered: Sequence[float]) -> float:
    """Relative standard error of the median of already sorted samples (inf if unknown).

    Distribution-free: the spread between the ranks that bound a 95% interval of the median,
    divided by 2 x 1.96. Unlike 1.2533 x std / sqrt(n), a few preempted samples far in the
    tail do not make a well-determined median look uncertain.
    """
    n = len(ordered)
    if n < 2:
        return float("inf")
    middle = n // 2
    median = ordered[middle] if n % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    half = Z * n ** 0.5 / 2
    lo = max(0, int(n / 2 - half))
    hi = min(n - 1, n - 1 - lo)
    spread = ordered[hi] - ordered[lo]
    if median <= 0:
        return 0.0 if spread == 0 else float("inf")
    return spread / (2 * Z) / median


def median_error(ordered: Sequence[float]) -> float:
    """The standard error of the median of already sorted samples, in their unit, by the same
    distribution-free interval as :func:`median_rse` (inf if unknown)."""
    n = len(ordered)
    if n < 2:
        return float("inf")
    half = Z * n ** 0.5 / 2
    lo = max(0, int(n / 2 - half))
    hi = min(n - 1, n - 1 - lo)
    return (ordered[hi] - ordered[lo]) / (2 * Z)


def stop_reason(ordered: Sequence[float], elapsed_s: float, rule: StoppingRule,
                _rse: Callable[[Sequence[float]], float] = median_rse,
                offset_error: float = 0.0) -> str | None:
    """Why sampling stops now (``count``, ``precision``, ``max_samples``, ``max_time``), or None.

    ``ordered`` is the samples so far, sorted; ``elapsed_s`` the time since sampling began;
    ``offset_error`` the standard error, in the samples' unit, of a cost that will be taken
    off every sample (the judge's hand-over): the figure is precise only once both are.
    """
    n = len(ordered)
    if n >= rule.max_samples:
        return "max_samples" if rule.adaptive else "count"
    if n < rule.min_samples:
        return None
    if elapsed_s >= rule.max_time_s:
        return "max_time"
    if elapsed_s < rule.min_time_s:
        return None
    if offset_error <= 0:
        if _rse(ordered) <= rule.target_rse:
            return "precision"
        if rule.floor_ms > 0 and median_error(ordered) <= rule.floor_ms:
            return "precision"
        return None
    error = math.hypot(median_error(ordered), offset_error)
    middle = ordered[len(ordered) // 2]
    if middle > 0 and error <= rule.target_rse * middle:
        return "precision"
    if rule.floor_ms > 0 and error <= rule.floor_ms:
        return "precision"
    return None


def sample_until(take: Callable[[int], float], now: Callable[[], float], rule: StoppingRule,
                 _insort: Callable[..., None] = insort,
                 _stop: Callable[..., str | None] = stop_reason,
                 give_up: Callable[[list[float], float], str | None] | None = None,
                 offset_error: Callable[[], float] | None = None
                 ) -> tuple[list[float], str]:
    """Call ``take(i)`` for samples i = 0, 1, ... until ``rule`` says stop, or ``give_up``
    (the samples in order, the seconds elapsed) says why the run ends before that.
    ``offset_error()``: the standard error so far of a cost taken off every sample later
    (:func:`stop_reason`).

    Returns the samples in the order taken and why sampling stopped. ``now`` is a clock in
    seconds. The helpers are bound as defaults, at import (before any user code runs).
    """
    samples: list[float] = []
    ordered: list[float] = []
    started = now()
    while True:
        value = take(len(samples))
        samples.append(value)
        _insort(ordered, value)
        elapsed = now() - started
        reason = _stop(ordered, elapsed, rule) if offset_error is None else \
            _stop(ordered, elapsed, rule, offset_error=offset_error())
        if reason is None and give_up is not None:
            reason = give_up(samples, elapsed)
        if reason is not None:
            return samples, reason
