"""The CPU timer path (harness.timer): adaptive and fixed counts, figures, the server's verdict."""

from __future__ import annotations

import statistics
import time

import pytest

from harness import timer
from profiling import integrity
from shared import stopping


def busy_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_an_adaptive_run_stops_within_the_bounds_and_passes_the_servers_check() -> None:
    raw = timer.bind("cpu").run(lambda: busy_wait(20e-6), None, None)
    n = len(raw.event_ms)
    assert stopping.MIN_SAMPLES <= n <= stopping.MAX_SAMPLES
    assert raw.sample_rule == "adaptive"
    assert raw.stopped_by in ("precision", "max_samples", "max_time")
    assert raw.sampling_ms >= stopping.MIN_TIME_S * 1e3 or n == stopping.MAX_SAMPLES
    verdict = integrity.assess(raw, None, "cpu")
    assert verdict.stats.num_samples == n and verdict.stats.method == "cpu_perf_counter"
    assert verdict.figures["samples"] == n and verdict.figures["sample_rule"] == "adaptive"


def test_a_fixed_count_takes_that_many_samples_with_a_refill_before_each() -> None:
    refilled: list[int] = []
    raw = timer.bind("cpu").run(lambda: None, 7, refilled.append)
    assert len(raw.event_ms) == 7 and raw.sample_rule == "fixed"
    assert raw.stopped_by == "count"
    assert refilled == list(range(7))
    assert integrity.assess(raw, 7, "cpu").figures["sample_rule"] == "fixed"


def test_a_short_call_has_no_back_to_back_figure_and_the_cpu_no_graph_figure() -> None:
    raw = timer.bind("cpu").run(lambda: None, 20, None)
    figures = integrity.assess(raw, 20, "cpu").figures
    assert figures["back_to_back_ms"] is None and "under 1 ms" in figures["back_to_back_reason"]
    assert figures["cuda_graph_ms"] is None
    assert figures["cuda_graph_reason"] == "no CUDA graphs on the CPU"


def test_a_call_of_a_millisecond_or_more_gets_the_back_to_back_figure() -> None:
    raw = timer.bind("cpu").run(lambda: busy_wait(1.2e-3), 20, None)
    calls = raw.back_to_back_calls
    assert calls == int(timer.BACK_TO_BACK_ROUND_MS / statistics.median(raw.event_ms))
    assert len(raw.back_to_back_round_ms) == timer.BACK_TO_BACK_ROUNDS
    figures = integrity.assess(raw, 20, "cpu").figures
    assert figures["back_to_back_ms"] == pytest.approx(1.2, rel=0.3)
    assert figures["back_to_back_calls"] == calls and figures["back_to_back_reason"] is None
    assert figures["regime"] == "isolated"
    assert figures["isolated_median_ms"] == pytest.approx(1.2, rel=0.3)


def test_a_request_for_a_few_samples_gets_no_extra_figures() -> None:
    raw = timer.bind("cpu").run(lambda: busy_wait(1.2e-3), 5, None)
    figures = integrity.assess(raw, 5, "cpu").figures
    assert figures["back_to_back_ms"] is None and raw.back_to_back_round_ms == []
    assert "fixed 5 samples" in figures["back_to_back_reason"]


@pytest.mark.parametrize(("samples", "median_ms", "calls"), [
    (1, 0.011, 10),   # one timed sample of a short kernel: still ten cross-check calls
    (2, 0.5, 10),
    (1, 5.0, 4),      # as many as 20 ms of GPU time holds
    (1, 900.0, 1),    # a long kernel: no more calls than it was timed
    (3, 900.0, 3),
    (100, 900.0, 10),
])
def test_the_independent_measures_take_enough_calls_even_for_few_samples(
        samples: int, median_ms: float, calls: int) -> None:
    assert timer.cross_check_calls(samples, median_ms, 10) == calls
