"""A quick answer (fewer samples fixed than the adaptive minimum) warms up with the fewest
calls, and says so; any other request keeps the timed warm-up."""

from __future__ import annotations

from harness.timer import WARMUP_MIN_CALLS, Timer
from shared.stopping import MIN_SAMPLES


def counting() -> tuple[list[int], object]:
    calls = [0]

    def fn() -> None:
        calls[0] += 1

    return calls, fn


def test_one_fixed_sample_warms_up_with_the_fewest_calls_and_the_report_says_why() -> None:
    timer = Timer()
    timer.warmup_s = 0.2
    calls, fn = counting()
    report = timer.run(fn, 1, None)  # type: ignore[arg-type]
    assert report.warmup_calls == WARMUP_MIN_CALLS
    assert calls[0] == WARMUP_MIN_CALLS + 1  # the warm-up and the one sample
    assert report.warmup_reason is not None and f"fewer than {MIN_SAMPLES}" in report.warmup_reason


def test_a_full_count_of_samples_keeps_the_timed_warm_up() -> None:
    timer = Timer()
    timer.warmup_s = 0.05
    _, fn = counting()
    report = timer.run(fn, MIN_SAMPLES, None)  # type: ignore[arg-type]
    assert report.warmup_calls > WARMUP_MIN_CALLS  # a call of microseconds, for 50 ms
    assert report.warmup_reason is None
