"""The checker's comparison of an audited timed sample (subprocess_worker.audited_difference):
whole outputs as in a trial, sampled ones at their positions."""

from __future__ import annotations

import torch

from subprocess_worker import audited_difference
from validation.compare import compare_outputs

WANT = torch.linspace(-3, 3, 1000).reshape(10, 100)
POSITIONS = torch.tensor([0, 17, 500, 999, 17], dtype=torch.int64)


def sampled(values: torch.Tensor, positions: torch.Tensor = POSITIONS) -> tuple[list, list]:
    return [{"shape": [10, 100], "sampled": True}], [values, positions]


def test_whole_outputs_are_compared_as_a_trial_compares_them() -> None:
    wrong = WANT.clone()
    wrong[3, 4] += 1
    plan = [{"shape": [10, 100], "sampled": False}]
    assert audited_difference(plan, [WANT.clone()], [WANT], None, None) is None
    assert audited_difference(plan, [wrong], [WANT], None, None) == compare_outputs([wrong], [WANT])


def test_sampled_values_that_match_the_reference_at_their_positions_pass() -> None:
    plan, got = sampled(WANT.reshape(-1)[POSITIONS].clone())
    assert audited_difference(plan, got, [WANT], None, None) is None


def test_a_wrong_sampled_value_is_named_as_a_difference_of_the_sample() -> None:
    values = WANT.reshape(-1)[POSITIONS].clone()
    values[2] += 0.5
    plan, got = sampled(values)
    problem = audited_difference(plan, got, [WANT], None, None)
    assert problem is not None and "sampled at random from float32[10, 100]" in problem
    assert "differ beyond" in problem


def test_a_sample_of_the_wrong_shape_or_with_positions_out_of_range_is_a_difference() -> None:
    values = WANT.reshape(-1)[POSITIONS].clone()
    plan, got = sampled(values)
    plan[0]["shape"] = [100, 10]
    assert "shape mismatch" in (audited_difference(plan, got, [WANT], None, None) or "")
    plan, got = sampled(values, torch.tensor([0, 1, 2, 3, 1000]))
    assert "not valid" in (audited_difference(plan, got, [WANT], None, None) or "")
    plan, got = sampled(values, POSITIONS.to(torch.int32))
    assert "not valid" in (audited_difference(plan, got, [WANT], None, None) or "")


def test_a_plan_that_is_not_a_list_of_descriptions_is_a_difference() -> None:
    assert "described" in (audited_difference("all fine", [WANT], [WANT], None, None) or "")
    plan, got = sampled(WANT.reshape(-1)[POSITIONS].clone())
    assert "fewer outputs" in (audited_difference(plan, got[:1], [WANT], None, None) or "")
