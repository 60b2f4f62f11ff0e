"""A request's ``problem_size``: the submitter's FLOPs, bytes and dtype of one call, checked when
the request is read."""

from __future__ import annotations

import pytest
from kernel_eval_client import (
    CompareBatchRequest,
    CompareRequest,
    EvaluationRequest,
    ProblemSize,
)
from pydantic import ValidationError

KERNEL = {"source_code": "class Model: pass", "kernel_type": "torch"}


def test_a_compare_request_carries_its_problem_size() -> None:
    request = CompareRequest.model_validate({
        "ref_kernel": KERNEL, "custom_kernel": KERNEL,
        "problem_size": {"flops": 2 * 8192**3, "bytes": 3 * 8192**2 * 2, "dtype": "bf16"}})
    assert request.problem_size == ProblemSize(flops=2 * 8192**3, bytes=3 * 8192**2 * 2,
                                               dtype="bf16")
    assert request.ignored_fields() == []
    assert CompareRequest(ref_kernel=KERNEL, custom_kernel=KERNEL).problem_size is None


def test_evaluate_and_every_candidate_of_a_batch_carry_it_too() -> None:
    size = {"bytes": 1 << 30}
    assert EvaluationRequest.model_validate(
        {"kernel": KERNEL, "problem_size": size}).problem_size == ProblemSize(bytes=1 << 30)
    batch = CompareBatchRequest.model_validate(
        {"ref_kernel": KERNEL, "custom_kernels": [KERNEL, KERNEL], "problem_size": size})
    assert [r.problem_size for r in batch.requests()] == [ProblemSize(bytes=1 << 30)] * 2


def test_json_numbers_in_exponent_form_are_read_as_whole_counts() -> None:
    assert ProblemSize.model_validate({"flops": 1.1e12}).flops == 1_100_000_000_000


@pytest.mark.parametrize(("body", "says"), [
    ({}, "needs flops, bytes or both"),
    ({"flop": 10}, "needs flops, bytes or both"),  # a misspelt key is not silently dropped
    ({"flops": -1}, "greater than or equal to 0"),
    ({"bytes": 0}, "greater than or equal to 1"),
    ({"flops": 1.5}, "fractional part"),
    ({"flops": 2**63}, "less than or equal to"),
    ({"bytes": 10, "dtype": "fp4"}, "'fp64', 'fp32'"),
    ({"bytes": 10, "dtype": "bf16"}, "give flops too"),
])
def test_a_problem_size_that_says_nothing_or_nonsense_is_refused(body: dict[str, object],
                                                                   says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        ProblemSize.model_validate(body)


def test_the_error_is_located_in_the_request() -> None:
    with pytest.raises(ValidationError) as caught:
        CompareRequest.model_validate({"ref_kernel": KERNEL, "custom_kernel": KERNEL,
                                       "problem_size": {"bytes": -5}})
    assert caught.value.errors()[0]["loc"] == ("problem_size", "bytes")


def test_zero_flops_state_a_pure_data_movement() -> None:
    size = ProblemSize(flops=0, bytes=2 << 28)
    assert size.flops == 0 and size.dtype is None
