"""Timing statistics."""

from __future__ import annotations

import numpy as np
import pytest

from profiling.stats import percentile, summarize
from profiling.timer import time_kernel


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


def test_cpu_timer_counts_calls_and_samples() -> None:
    calls = []
    stats = time_kernel(lambda: calls.append(1), "cpu", num_trials=7)
    assert stats.num_samples == 7 and stats.method == "cpu_perf_counter"
    assert len(calls) >= 7 + 3  # warm-up calls come first
