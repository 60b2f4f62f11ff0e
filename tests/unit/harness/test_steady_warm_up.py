"""A warm-up runs its least time, then stops once the time per call has settled (two windows
agree), and at its most time where it never does; on a clock the test drives."""

from __future__ import annotations

from collections.abc import Callable

from harness.timer import (
    WARMUP_LEAST_S,
    WARMUP_MIN_CALLS,
    WARMUP_S,
    WARMUP_STEADY,
    WARMUP_WINDOW_S,
    Timer,
)


class Clock:
    """A nanosecond clock that only the calls advance."""

    def __init__(self) -> None:
        self.ns = 0.0

    def __call__(self) -> float:
        return self.ns


def warmed(call_ns: Callable[[int], float]) -> tuple[list[float], int, float]:
    """Warm up a call whose i-th run takes ``call_ns(i)``: (each call's ns, calls, ms)."""
    clock = Clock()
    timer = Timer()
    timer._now = clock  # type: ignore[assignment]
    timer._pause = lambda s: None  # type: ignore[assignment]
    took: list[float] = []

    def fn() -> None:
        took.append(call_ns(len(took)))
        clock.ns += took[-1]

    calls, spent_ms = timer.warm_up(fn)
    return took, calls, spent_ms


def test_a_steady_call_warms_up_its_least_time_and_about_a_window_more_not_its_most() -> None:
    _, calls, spent_ms = warmed(lambda i: 10_000.0)  # 10 us a call, always
    assert calls > WARMUP_MIN_CALLS
    assert WARMUP_LEAST_S * 1e3 <= spent_ms <= (WARMUP_LEAST_S + 2 * WARMUP_WINDOW_S) * 1e3
    assert spent_ms < WARMUP_S * 1e3


def test_a_call_still_getting_faster_is_warmed_up_until_it_has_settled() -> None:
    # a clock ramp: each call 3x as long at first, settling over ~35 ms
    def ramp(i: int) -> float:
        return 10_000.0 * (1 + 2 * max(0.0, 1 - i / 2_000))

    took, _, spent_ms = warmed(ramp)
    assert spent_ms > WARMUP_LEAST_S * 1e3 + 5  # the least time alone would stop mid-ramp
    last = took[-200:]
    assert max(last) <= 10_000.0 * (1 + 2 * WARMUP_STEADY)  # the samples start on the floor


def test_a_call_that_never_settles_is_warmed_up_for_the_most_time() -> None:
    # alternate windows 10% apart
    def wobble(i: int) -> float:
        return 10_000.0 if (i // 500) % 2 == 0 else 11_000.0

    _, calls, spent_ms = warmed(wobble)
    assert WARMUP_S * 1e3 <= spent_ms <= WARMUP_S * 1e3 + 0.011
    assert calls > WARMUP_MIN_CALLS


def test_a_call_longer_than_the_window_settles_call_by_call() -> None:
    _, calls, spent_ms = warmed(lambda i: 8e6)  # 8 ms a call
    assert calls == 4  # 24 ms: past the least time, the 4th call as long as the 3rd
    assert spent_ms < WARMUP_S * 1e3
