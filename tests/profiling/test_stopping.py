"""The stopping rule (shared.stopping): given a stream of samples and a clock, when it stops."""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable

import pytest

from shared import stopping
from shared.stopping import StoppingRule, median_rse, sample_until


def run(stream: Callable[[int], float], seconds_per_sample: float,
        rule: StoppingRule | None = None) -> tuple[list[float], str]:
    """Sample ``stream`` under ``rule`` (adaptive by default) with a fake clock."""
    clock = [0.0]

    def take(i: int) -> float:
        clock[0] += seconds_per_sample
        return stream(i)

    return sample_until(take, lambda: clock[0], rule or StoppingRule())


def lognormal(sigma: float, seed: int = 1) -> Callable[[int], float]:
    rng = random.Random(seed)
    return lambda i: rng.lognormvariate(0.0, sigma)


def test_a_fixed_count_takes_exactly_that_many_whatever_the_noise() -> None:
    samples, reason = run(lognormal(2.0), 10.0, StoppingRule.fixed(7))
    assert (len(samples), reason) == (7, "count")
    assert StoppingRule.for_request(7) == StoppingRule.fixed(7)
    assert StoppingRule.for_request(None).adaptive and not StoppingRule.fixed(7).adaptive


def test_steady_samples_stop_at_the_minimum_count_once_the_minimum_time_has_passed() -> None:
    samples, reason = run(lambda i: 1.0, 0.01)  # 20 samples take 0.2 s > MIN_TIME_S
    assert (len(samples), reason) == (stopping.MIN_SAMPLES, "precision")


def test_short_samples_continue_until_the_minimum_time() -> None:
    samples, reason = run(lambda i: 1.0, 0.001)  # 1 ms per sample: 50 ms needs ~50 samples
    assert reason == "precision"
    assert stopping.MIN_SAMPLES < len(samples) <= 51
    assert len(samples) * 0.001 >= stopping.MIN_TIME_S - 1e-9


def test_moderate_noise_stops_as_soon_as_the_median_is_precise_enough() -> None:
    samples, reason = run(lognormal(0.05), 0.001)
    assert reason == "precision"
    assert stopping.MIN_SAMPLES <= len(samples) < stopping.MAX_SAMPLES
    assert median_rse(sorted(samples)) <= stopping.TARGET_RSE
    # one sample fewer was not yet precise enough (the time minimum had long passed)
    assert median_rse(sorted(samples[:-1])) > stopping.TARGET_RSE


def test_more_noise_needs_more_samples() -> None:
    quiet, _ = run(lognormal(0.03, seed=2), 0.001)
    noisy, _ = run(lognormal(0.1, seed=2), 0.001)
    assert len(noisy) > 2 * len(quiet)


def test_hopeless_noise_stops_at_the_sample_cap() -> None:
    samples, reason = run(lognormal(3.0), 0.0001)
    assert (len(samples), reason) == (stopping.MAX_SAMPLES, "max_samples")


def test_hopeless_noise_on_a_slow_kernel_stops_at_the_time_cap() -> None:
    samples, reason = run(lognormal(3.0), 0.01)  # 2 s are 200 samples
    assert reason == "max_time"
    assert len(samples) == pytest.approx(stopping.MAX_TIME_S / 0.01, abs=1)


def test_the_time_cap_never_cuts_below_the_minimum_count() -> None:
    samples, reason = run(lognormal(3.0), 0.5)  # one sample takes half a second
    assert (len(samples), reason) == (stopping.MIN_SAMPLES, "max_time")


def test_median_rse_matches_the_normal_theory_on_normal_samples() -> None:
    rng = random.Random(3)
    samples = sorted(rng.gauss(10.0, 1.0) for _ in range(400))
    theory = 1.2533 * 1.0 / 400 ** 0.5 / 10.0
    assert median_rse(samples) == pytest.approx(theory, rel=0.35)


def test_median_rse_is_not_inflated_by_a_few_preempted_samples() -> None:
    samples = sorted([1.0 + 0.001 * (i % 7) for i in range(95)] + [50.0] * 5)
    std_based = 1.2533 * statistics.stdev(samples) / len(samples) ** 0.5 / statistics.median(samples)
    assert median_rse(samples) < stopping.TARGET_RSE < std_based


@pytest.mark.parametrize(("samples", "expected"), [
    ([], float("inf")), ([1.0], float("inf")), ([0.0, 0.0, 0.0], 0.0), ([0.0, 0.0, 1.0], float("inf")),
    ([0.0] * 10 + [1.0], 0.0),
    ([2.0] * 30, 0.0),
])
def test_median_rse_edge_cases(samples: list[float], expected: float) -> None:
    assert median_rse(samples) == expected


def test_precise_samples_wait_until_the_cost_taken_off_them_is_precise_too() -> None:
    """Steady samples of 1.0, less a cost known to 0.02: not precise (0.5% of 1.0 is 0.005);
    known to 0.001, they stop at the minimum."""
    clock = [0.0]

    def take(i: int) -> float:
        clock[0] += 0.01
        return 1.0

    errors = iter([0.02] * 50 + [0.001] * 1000)
    samples, reason = sample_until(take, lambda: clock[0], StoppingRule(),
                                   offset_error=lambda: next(errors))
    assert reason == "precision" and len(samples) == 51
    samples, reason = sample_until(take, lambda: clock[0], StoppingRule(),
                                   offset_error=lambda: 0.02)
    assert reason == "max_time"


def test_the_floor_counts_the_cost_taken_off_too() -> None:
    """A microsecond kernel is precise at the floor only once its samples' median and the
    cost taken off are, together, within it."""
    ordered = [0.003] * 40
    rule = StoppingRule(floor_ms=0.0001)
    assert stopping.stop_reason(ordered, 1.0, rule, offset_error=0.00005) == "precision"
    assert stopping.stop_reason(ordered, 1.0, rule, offset_error=0.0005) is None
