"""How many correctness trials a comparison runs when each one moves gigabytes."""

from orchestration.executor import (
    CORRECTNESS_BYTES_BUDGET,
    MIN_CORRECT_TRIALS,
    _trials_within_budget,
)

GIB = 2**30


def test_small_problems_run_every_requested_trial() -> None:
    assert _trials_within_budget(5, 64 * 2**20) == 5
    assert _trials_within_budget(50, GIB // 4) == 50


def test_trials_of_a_6_gb_problem_fit_the_budget_but_never_fall_below_the_minimum() -> None:
    per_trial = int(2 * 6.4 * GIB)  # inputs to the kernel, outputs back to the checker
    run = _trials_within_budget(5, per_trial)
    assert run == max(MIN_CORRECT_TRIALS, CORRECTNESS_BYTES_BUDGET // per_trial) < 5
    assert _trials_within_budget(5, 100 * GIB) == MIN_CORRECT_TRIALS


def test_a_request_for_fewer_trials_than_the_minimum_is_kept() -> None:
    assert _trials_within_budget(1, 100 * GIB) == 1
