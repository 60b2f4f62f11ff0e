"""The audit's comparison (judge.audit.difference): whole outputs as a trial compares them,
sampled ones at their positions."""

from __future__ import annotations

import torch

from judge.audit import difference
from judge.clock import Kept

WANT = torch.linspace(-3, 3, 1000).reshape(10, 100)
POSITIONS = torch.tensor([0, 17, 500, 999, 17], dtype=torch.int64)


def whole(t: torch.Tensor) -> Kept:
    return Kept(index=4, outputs=[t], positions=[None], input_prints=[])


def sampled(values: torch.Tensor) -> Kept:
    return Kept(index=4, outputs=[values], positions=[POSITIONS], input_prints=[])


def test_whole_outputs_pass_when_equal_and_name_the_sample_when_not() -> None:
    assert difference(whole(WANT.clone()), [WANT], None, None) is None
    wrong = WANT.clone()
    wrong[3, 4] += 1
    problem = difference(whole(wrong), [WANT], None, None)
    assert problem is not None and problem.startswith("timed sample 5 (picked after it ran)")
    assert "differ beyond" in problem


def test_sampled_values_that_match_the_reference_at_their_positions_pass() -> None:
    assert difference(sampled(WANT.reshape(-1)[POSITIONS].clone()), [WANT], None, None) is None


def test_a_wrong_sampled_value_is_named_as_a_difference_of_the_sample() -> None:
    values = WANT.reshape(-1)[POSITIONS].clone()
    values[2] += 0.5
    problem = difference(sampled(values), [WANT], None, None)
    assert problem is not None and "sampled at random from float32[10, 100]" in problem


def test_a_kept_sample_with_the_wrong_count_or_dtype_is_a_difference() -> None:
    values = WANT.reshape(-1)[POSITIONS].clone()
    assert "output(s)" in (difference(sampled(values), [WANT, WANT], None, None) or "")
    assert "dtype mismatch" in (difference(sampled(values.double()), [WANT], None, None) or "")


def test_float8_samples_a_unit_off_pass_and_wrong_ones_fail_whole_or_sampled() -> None:
    want = (WANT * 2).to(torch.float8_e4m3fn)
    # the next bit pattern: one unit in the last place further from zero (no NaN within ±6)
    a_unit_off = (want.view(torch.uint8) + 1).view(torch.float8_e4m3fn)
    wrong = (WANT * 3).to(torch.float8_e4m3fn)
    assert difference(whole(a_unit_off), [want], None, None) is None
    assert difference(sampled(a_unit_off.reshape(-1)[POSITIONS]), [want], None, None) is None
    problem = difference(whole(wrong), [want], None, None)
    assert problem is not None and "of float8_e4m3fn[10, 100] differ" in problem
    problem = difference(sampled(wrong.reshape(-1)[POSITIONS]), [want], None, None)
    assert problem is not None and "sampled at random from float8_e4m3fn[10, 100]" in problem
