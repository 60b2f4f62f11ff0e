"""The output comparator: what passes, what fails, and what the message says."""

from __future__ import annotations

import pytest
import torch

from validation.compare import compare_outputs
from validation.tolerances import tolerance_for


def test_equal_outputs_pass() -> None:
    x = torch.randn(100)
    assert compare_outputs([x.clone()], [x]) is None


def test_within_tolerance_passes_and_beyond_fails() -> None:
    ref = torch.ones(10)
    assert compare_outputs([ref + 5e-5], [ref]) is None
    message = compare_outputs([ref + 1e-2], [ref])
    assert message is not None and "10 of 10 elements" in message


def test_message_names_count_max_diff_and_first_index() -> None:
    ref = torch.zeros(4, 5)
    got = ref.clone()
    got[1, 2] = 0.5
    got[3, 4] = 2.0
    message = compare_outputs([got], [ref])
    assert message == (
        "output: 2 of 20 elements of float32[4, 5] differ beyond atol=0.001, rtol=0.001; "
        "max abs diff 2 at [3, 4] (rel inf); first mismatch at [1, 2]: got 0.5, expected 0.0"
    )


def test_nan_never_passes_where_the_reference_has_none() -> None:
    ref = torch.ones(3)
    got = ref.clone()
    got[1] = float("nan")
    assert "1 of 3" in compare_outputs([got], [ref])
    assert compare_outputs([got], [got.clone()]) is None  # NaN where the reference has NaN


def test_infinities_must_match() -> None:
    ref = torch.tensor([float("inf"), 1.0])
    assert compare_outputs([ref.clone()], [ref]) is None
    assert compare_outputs([torch.tensor([-float("inf"), 1.0])], [ref]) is not None
    assert compare_outputs([torch.tensor([1e30, 1.0])], [ref]) is not None


def test_counts_shapes_and_dtypes_are_named() -> None:
    a = torch.ones(3)
    assert "produced 2 output(s) but the reference produced 1" in compare_outputs([a, a], [a])
    assert "shape mismatch: expected [3], got [1, 3]" in compare_outputs([a[None]], [a])
    assert "dtype mismatch: expected float32, got float16" in compare_outputs([a.half()], [a])
    assert compare_outputs([a, a * 2], [a, a * 3]).startswith("output 1:")


def test_integers_compare_exactly() -> None:
    ref = torch.arange(10)
    assert compare_outputs([ref.clone()], [ref]) is None
    got = ref.clone()
    got[9] += 1
    assert "1 of 10" in compare_outputs([got], [ref])


def test_tolerance_defaults_and_overrides() -> None:
    assert tolerance_for("float32", None, None) == (1e-3, 1e-3)
    assert tolerance_for("bfloat16", None, None) == (2e-2, 2e-2)
    assert tolerance_for("int32", None, None) == (0.0, 0.0)
    assert tolerance_for("float32", 0.5, None) == (0.5, 1e-3)
    ref = torch.ones(3)
    assert compare_outputs([ref + 0.1], [ref], atol=0.2) is None


def test_zeros_for_values_below_atol_fail_on_the_relative_norm() -> None:
    import torch

    want = torch.softmax(torch.rand(4, 65536), dim=-1)  # every value ~1.5e-5 < atol 1e-3
    problem = compare_outputs([torch.zeros_like(want)], [want])
    assert problem is not None and "relative to the reference's scale" in problem


def test_a_reordered_sum_passes_the_relative_norm() -> None:
    import torch

    x = torch.rand(256, 1024, dtype=torch.float32)
    want = x.sum(dim=1)
    got = x.flip(1).cumsum(dim=1)[:, -1]  # same sum, another order
    assert compare_outputs([got], [want]) is None


def test_an_explicit_tolerance_override_skips_the_relative_norm() -> None:
    import torch

    want = torch.full((1000,), 1e-6)
    assert compare_outputs([torch.zeros_like(want)], [want], atol=1e-3) is None


def test_a_passing_comparison_reads_its_sums_back_once(monkeypatch) -> None:
    reads = []
    tolist = torch.Tensor.tolist

    def counted(self):
        reads.append(self.numel())
        return tolist(self)

    def no_item(self):
        raise AssertionError("a passing comparison read a scalar on its own")

    monkeypatch.setattr(torch.Tensor, "tolist", counted)
    monkeypatch.setattr(torch.Tensor, "item", no_item)
    x = torch.randn(300)
    assert compare_outputs([x.clone()], [x]) is None
    assert compare_outputs([torch.arange(9)], [torch.arange(9)]) is None
    assert reads == [3, 1]  # mismatches and both norms; mismatches alone for integers


def test_chunks_report_the_first_and_the_worst_mismatch_across_them(monkeypatch) -> None:
    from validation import compare

    ref = torch.zeros(100)
    got = ref.clone()
    got[42], got[7], got[99] = 3.0, 0.5, 1.0
    whole = compare_outputs([got], [ref])
    monkeypatch.setattr(compare, "CHUNK", 16)
    assert compare_outputs([got], [ref]) == whole
    assert "3 of 100 elements" in whole and "max abs diff 3 at [42]" in whole
    assert "first mismatch at [7]" in whole


def test_the_relative_norm_rule_holds_over_several_chunks(monkeypatch) -> None:
    from validation import compare

    ref = torch.full((64,), 1e-4)  # every value below atol: zeros pass elementwise
    got = torch.zeros(64)
    monkeypatch.setattr(compare, "CHUNK", 8)
    message = compare_outputs([got], [ref])
    assert message is not None and "relative to the reference's scale" in message


def test_a_complex_output_within_float32_rounding_passes() -> None:
    x = torch.randn(256)
    want = torch.fft.fft(x)
    got = torch.fft.ifft(torch.fft.fft(want))  # the same values through float32 rounding
    assert not torch.equal(got, want)
    assert compare_outputs([got], [want]) is None
    assert compare_outputs([want * 1.01], [want]) is not None


def test_a_complex_output_below_atol_with_no_work_in_it_fails_by_its_norm() -> None:
    want = torch.full((64,), 1e-4j, dtype=torch.complex64)  # every value below atol
    message = compare_outputs([torch.zeros(64, dtype=torch.complex64)], [want])
    assert message is not None and "relative to the reference's scale" in message


FLOAT8 = [torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz]


def float8_values(dtype: torch.dtype) -> torch.Tensor:
    """Every finite value of ``dtype`` (each bit pattern once; NaN and infinities left out)."""
    every = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype)
    wide = every.float()
    return every[torch.isfinite(wide)]


def next_up(t: torch.Tensor) -> torch.Tensor:
    """Each value of the float8 tensor ``t`` one unit in the last place further from zero."""
    values = float8_values(t.dtype).float().unique()  # sorted, one zero
    at = torch.searchsorted(values, t.float().abs())
    return (values[(at + 1).clamp(max=values.numel() - 1)] * t.float().sign()).to(t.dtype)


def test_float8_default_tolerances_are_one_unit_in_the_last_place() -> None:
    assert tolerance_for("float8_e4m3fn", None, None) == (2**-9, 0.125)
    assert tolerance_for("float8_e4m3fnuz", None, None) == (2**-10, 0.125)
    assert tolerance_for("float8_e5m2", None, None) == (2**-16, 0.25)
    assert tolerance_for("float8_e5m2fnuz", None, None) == (2**-17, 0.25)


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_a_float8_output_one_unit_off_passes_and_two_units_off_or_nan_fails(
        dtype: torch.dtype) -> None:
    want = float8_values(dtype)
    want = want[(want.float() != 0) & (want.float().abs() < torch.finfo(dtype).max / 4)]
    assert compare_outputs([want.clone()], [want]) is None
    assert compare_outputs([next_up(want)], [want]) is None
    message = compare_outputs([next_up(next_up(want))], [want])
    name = str(dtype).removeprefix("torch.")
    assert message is not None and f"elements of {name}[{want.numel()}] differ" in message
    with_nan = next_up(want)
    with_nan[7] = float("nan")
    message = compare_outputs([with_nan], [want])
    assert message is not None and f"1 of {want.numel()}" in message and "got nan" in message
    assert compare_outputs([with_nan], [with_nan.clone()]) is None  # NaN where the reference has NaN
    assert compare_outputs([want], [with_nan]) is not None  # a number where it has NaN


def test_float8_e5m2_infinities_must_match_while_its_finite_values_may_be_a_unit_off() -> None:
    want = torch.tensor([float("inf"), -float("inf"), 1.0]).to(torch.float8_e5m2)
    assert compare_outputs([torch.tensor([float("inf"), -float("inf"), 1.25]).to(
        torch.float8_e5m2)], [want]) is None
    flipped = torch.tensor([-float("inf"), float("inf"), 1.0]).to(torch.float8_e5m2)
    assert compare_outputs([flipped], [want]) is not None
    largest = torch.tensor([57344.0, -57344.0, 1.0]).to(torch.float8_e5m2)
    assert compare_outputs([largest], [want]) is not None


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float8_zeros_for_values_below_atol_fail_on_the_relative_norm(dtype: torch.dtype) -> None:
    atol, _ = tolerance_for(str(dtype).removeprefix("torch."), None, None)
    want = torch.full((64,), atol).to(dtype)  # every value at atol: zeros pass elementwise
    message = compare_outputs([torch.zeros(64, dtype=dtype)], [want])
    assert message is not None and "relative to the reference's scale" in message
