"""Timing statistics."""

from __future__ import annotations

import numpy as np
import pytest

from harness import timer
from profiling.stats import percentile, summarize


def test_summary_matches_numpy() -> None:
    samples = list(np.random.default_rng(0).gamma(2.0, 1.5, size=257))
    stats = summarize(samples, "test", "cpu")
    assert stats.mean == pytest.approx(np.mean(samples))
    assert stats.std == pytest.approx(np.std(samples, ddof=1))
    assert stats.median == pytest.approx(np.median(samples))
    assert stats.percentile_95 == pytest.approx(np.percentile(samples, 95))
    assert stats.percentile_99 == pytest.approx(np.percentile(samples, 99))
    assert (stats.min, stats.max, stats.num_samples) == (min(samples), max(samples), 257)


def test_single_sample_and_empty() -> None:
    stats = summarize([2.0], "test", "cpu")
    assert stats.std == 0 and stats.percentile_99 == 2.0
    with pytest.raises(ValueError):
        summarize([], "test", "cpu")
    assert percentile([1.0, 3.0], 50) == 2.0


def test_cpu_timer_counts_calls_samples_and_refills_before_each_sample() -> None:
    calls, refills = [], []
    raw = timer.bind("cpu").run(lambda: calls.append(1), 7, refills.append)
    assert len(raw.event_ms) == 7 and raw.method == "cpu_perf_counter"
    assert refills == list(range(7)) and raw.fresh_inputs == 7
    assert len(calls) == 7 + raw.warmup_calls and raw.warmup_calls >= 3


def test_cpu_timer_is_not_fooled_by_a_patched_perf_counter(monkeypatch) -> None:
    import time

    bound = timer.bind("cpu")  # bound before the "user code" below patches the clock
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    monkeypatch.setattr(time, "perf_counter_ns", lambda: 0)
    raw = bound.run(lambda: sum(range(20000)), 5, None)
    assert min(raw.event_ms) > 0
