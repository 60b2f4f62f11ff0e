"""Inputs from a seed (harness.inputs): the secret's inputs differ from the request's and from
another secret's, each timed call gets content of its own, and the same call made again is
the same."""

from __future__ import annotations

import contextlib

import pytest
import torch
from kernel_eval_client.io_contract import IOContract

from compilation.base import Arguments
from harness import inputs
from harness.inputs import SampleInputs, derive, trial_salt

IO = IOContract.model_validate({"args": [
    {"name": "x", "type": "tensor", "role": "input",
     "tensor_spec": {"shape": [64], "dtype": "float32", "init": {"kind": "randn", "seed": 3}}},
    {"name": "n", "type": "tensor", "role": "input",
     "tensor_spec": {"shape": [8], "dtype": "int64",
                     "init": {"kind": "uniform", "low": 0, "high": 10, "seed": 4}}},
    {"name": "out", "type": "tensor", "role": "output",
     "tensor_spec": {"shape": [64], "dtype": "float32"}},
]})
FIXED = IOContract.model_validate({"args": [
    {"name": "x", "type": "tensor", "role": "input",
     "tensor_spec": {"shape": [4], "dtype": "float32", "init": {"kind": "ones"}}}]})


class Kernel:
    def __init__(self, io: IOContract) -> None:
        self.io = io

    def make_inputs(self, trial: int, salt: int = 0) -> Arguments:
        return Arguments.from_io(self.io, "cpu", trial, salt)


def fresh(secret: int, io: IOContract = IO) -> SampleInputs:
    return SampleInputs(Kernel(io), secret, contextlib.nullcontext, "cpu")  # type: ignore[arg-type]


def test_trial_0_keeps_the_requests_seeds_and_later_trials_the_secrets() -> None:
    assert trial_salt(12345, 0) == 0 and trial_salt(None, 3) == 0
    assert trial_salt(12345, 1) != trial_salt(12345, 2) != trial_salt(999, 1)
    public = Arguments.from_io(IO, "cpu", 1, 0).values[0]
    secret = Arguments.from_io(IO, "cpu", 1, trial_salt(12345, 1)).values[0]
    assert not torch.equal(public, secret)


def test_every_timed_call_gets_fresh_content_and_the_same_call_again_the_same() -> None:
    a, b = fresh(7), fresh(7)
    first = [t.clone() for t in a.values(0)[:2]]
    second = [t.clone() for t in a.values(1)[:2]]
    assert not torch.equal(first[0], second[0]) and not torch.equal(first[1], second[1])
    again = b.values(0)[:2]
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert first[1].dtype == torch.int64 and 0 <= int(first[1].min()) and int(first[1].max()) < 10


def test_another_secret_gives_other_inputs() -> None:
    assert not torch.equal(fresh(7).values(0)[0], fresh(8).values(0)[0])


def test_inputs_the_request_fixes_are_the_same_every_call_and_the_note_says_so() -> None:
    inputs = fresh(7, FIXED)
    assert inputs.note is not None and "fixed by the request" in inputs.note
    assert torch.equal(inputs.values(0)[0], torch.ones(4))
    assert fresh(7).note is None


def test_derive_separates_labels() -> None:
    assert derive(1, "sample", 0) != derive(1, "sample", 1) != derive(1, "trial", 0)
    assert 0 <= derive(2**70, "x") < 2**63


def test_a_timing_taken_again_draws_inputs_no_earlier_reading_had() -> None:
    # a kernel that remembered the first reading's inputs (and their outputs) gains nothing
    # in the second: a reading is part of every sample's seed
    first = SampleInputs(Kernel(IO), 777, contextlib.nullcontext, "cpu")  # type: ignore[arg-type]
    again = SampleInputs(Kernel(IO), 777, contextlib.nullcontext, "cpu",  # type: ignore[arg-type]
                         reading=1)
    seen = [first.values(i)[0].clone() for i in range(5)]
    for i in range(5):
        redrawn = again.values(i)[0]
        assert not any(torch.equal(redrawn, s) for s in seen)
    # and one reading's inputs are made again exactly (the audit relies on it)
    same = SampleInputs(Kernel(IO), 777, contextlib.nullcontext, "cpu")  # type: ignore[arg-type]
    assert all(torch.equal(same.values(i)[0], seen[i]) for i in range(5))


def test_float8_inputs_are_drawn_again_for_every_timed_call() -> None:
    io = IOContract.model_validate({"args": [
        {"name": "x", "type": "tensor", "role": "input",
         "tensor_spec": {"shape": [256], "dtype": "float8_e4m3fn",
                         "init": {"kind": "randn", "seed": 3, "std": 1000}}},
        {"name": "y", "type": "tensor", "role": "input",
         "tensor_spec": {"shape": [256], "dtype": "float8_e5m2",
                         "init": {"kind": "uniform", "low": -1, "high": 1, "seed": 4}}}]})
    inputs = fresh(7, io)
    first = [t.clone() for t in inputs.values(0)]
    second = inputs.values(1)
    assert [t.dtype for t in second] == [torch.float8_e4m3fn, torch.float8_e5m2]
    for a, b in zip(first, second):
        assert not torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    x, y = (t.float() for t in second)
    assert torch.isfinite(x).all() and x.abs().max() == 448  # saturated, not NaN
    assert -1 <= y.min() and y.max() <= 1 and y.std() > 0.3


def test_with_two_sets_a_calls_values_hold_while_the_next_calls_are_made(monkeypatch) -> None:
    two = SampleInputs(Kernel(IO), 7, contextlib.nullcontext, "cpu",  # type: ignore[arg-type]
                       two_sets=True)
    assert two.apart
    first = two.values(0)
    kept = first[0].clone()
    second = two.values(1)
    assert first[0].data_ptr() != second[0].data_ptr()
    assert torch.equal(first[0], kept)  # untouched by call 1's drawing
    # the same content as one set's, call by call (the audit makes them again with one)
    one = fresh(7)
    assert torch.equal(one.values(0)[0], kept) and torch.equal(one.values(1)[0], second[0])
    assert not one.apart
    # arguments too large for a second set: one set, and the run is told so
    monkeypatch.setattr(inputs, "TWO_SETS_BYTES", 64)
    big = SampleInputs(Kernel(IO), 7, contextlib.nullcontext, "cpu",  # type: ignore[arg-type]
                       two_sets=True)
    assert not big.apart and big.values(0)[0].data_ptr() == big.values(1)[0].data_ptr()


class FailsSecond(Kernel):
    """A kernel whose inputs are made once, then raise ``error`` (a second set's making)."""

    def __init__(self, io: IOContract, error: Exception) -> None:
        super().__init__(io)
        self.error, self.made = error, 0

    def make_inputs(self, trial: int, salt: int = 0) -> Arguments:
        self.made += 1
        if self.made > 1:
            raise self.error
        return super().make_inputs(trial, salt)


def test_a_second_set_that_does_not_fit_the_device_leaves_one() -> None:
    full = FailsSecond(IO, torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    one = SampleInputs(full, 7, contextlib.nullcontext, "cpu",  # type: ignore[arg-type]
                       two_sets=True)
    assert not one.apart
    assert one.values(0)[0].data_ptr() == one.values(1)[0].data_ptr()


def test_a_second_set_that_fails_otherwise_is_the_inputs_failure() -> None:
    with pytest.raises(ValueError, match="get_inputs broke"):
        SampleInputs(FailsSecond(IO, ValueError("get_inputs broke")), 7,  # type: ignore[arg-type]
                     contextlib.nullcontext, "cpu", two_sets=True)
