"""The robustness cases' input transforms, when a case applies, and the tolerance it is held
to (validation.robustness)."""

from __future__ import annotations

import pytest
import torch
from kernel_eval_client.io_contract import ArgSpec, TensorInit, TensorSpec

from shared.models import RobustnessCase, RobustnessReport
from validation.robustness import (
    CASES,
    OUTLIER_EVERY,
    OUTLIER_FACTOR,
    atol_scales,
    judged,
    skip_reason,
    varied,
    worst_error,
)

BY_NAME = {case.name: case for case in CASES}


def test_the_cases_are_the_two_scales_and_three_distributions_in_order() -> None:
    assert [c.name for c in CASES] == ["scale_1e-3", "scale_1e3", "uniform", "outliers", "zeros"]
    assert [c.kind for c in CASES] == ["scale", "scale", "distribution", "distribution",
                                       "distribution"]


@pytest.mark.parametrize(("name", "factor"), [("scale_1e-3", 1e-3), ("scale_1e3", 1e3)])
def test_a_scale_case_scales_floating_inputs_and_leaves_indices_masks_and_scalars(
        name: str, factor: float) -> None:
    x, index, mask = torch.randn(64), torch.arange(8), torch.rand(64) > 0.5
    out = varied([x, index, mask, 3, [x]], None, BY_NAME[name], seed=1)
    assert out is not None
    torch.testing.assert_close(out[0], x * factor)
    torch.testing.assert_close(out[4][0], x * factor)  # nested in a list, as get_inputs may
    assert torch.equal(out[1], index) and torch.equal(out[2], mask) and out[3] == 3
    # every tensor is new: a reference writing its inputs reaches neither the sample nor
    # another case's
    assert all(o.data_ptr() != v.data_ptr() for o, v in zip(out[:3], [x, index, mask]))


def test_an_iocontracts_output_buffers_and_integer_inputs_are_not_varied() -> None:
    spec = TensorSpec(shape=[16], init=TensorInit(kind="randn"))
    specs = [ArgSpec(name="x", type="tensor", tensor_spec=spec),
             ArgSpec(name="y", type="tensor", tensor_spec=TensorSpec(shape=[16]), role="output"),
             ArgSpec(name="n", type="int", value=16)]
    x, y = torch.randn(16), torch.full((16,), float("nan"))
    out = varied([x, y, 16], specs, BY_NAME["zeros"], seed=1)
    assert out is not None
    assert torch.equal(out[0], torch.zeros(16))
    assert torch.isnan(out[1]).all() and out[2] == 16


def test_inputs_without_a_floating_point_tensor_have_no_case() -> None:
    assert varied([torch.arange(8), 2.5], None, BY_NAME["scale_1e3"], seed=1) is None


def test_uniform_spreads_each_input_over_its_own_range_keeping_its_sign() -> None:
    positive = torch.rand(4096) + 0.5  # a domain an op may need (a log's, a sqrt's)
    gaussian = torch.randn(4096)
    constant = torch.full((8,), 2.0)
    out = varied([positive, gaussian, constant], None, BY_NAME["uniform"], seed=3)
    assert out is not None
    assert out[0].min() >= positive.min() and out[0].max() <= positive.max()
    assert out[1].min() >= gaussian.min() and out[1].max() <= gaussian.max()
    # uniform, not normal: far more of it beyond two standard deviations
    assert (out[1].abs() > 2).float().mean() > 2 * (gaussian.abs() > 2).float().mean()
    assert torch.equal(out[2], constant)


def test_outliers_are_a_few_elements_times_the_factor_placed_by_the_seed() -> None:
    x = torch.rand(10_000) + 1.0
    one = varied([x], None, BY_NAME["outliers"], seed=5)
    again = varied([x], None, BY_NAME["outliers"], seed=5)
    other = varied([x], None, BY_NAME["outliers"], seed=6)
    assert one is not None and again is not None and other is not None
    changed = one[0] != x
    assert 1 <= int(changed.sum()) <= 10_000 // OUTLIER_EVERY
    torch.testing.assert_close(one[0][changed], x[changed] * OUTLIER_FACTOR)
    assert torch.equal(one[0], again[0]) and not torch.equal(one[0], other[0])
    small = varied([torch.ones(3)], None, BY_NAME["outliers"], seed=5)
    assert small is not None and int((small[0] != 1).sum()) == 1  # at least one


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64,
                                   torch.float8_e4m3fn, torch.complex64])
def test_every_floating_dtype_is_varied_in_its_own_dtype(dtype: torch.dtype) -> None:
    x = torch.randn(256).to(dtype) if not dtype.is_complex else torch.randn(256, dtype=dtype)
    for case in CASES:
        out = varied([x], None, case, seed=2)
        assert out is not None and out[0].dtype == dtype and out[0].shape == x.shape, case.name
    half = varied([x], None, BY_NAME["scale_1e-3"], seed=2)
    assert half is not None
    if dtype.is_complex:
        torch.testing.assert_close(half[0], x * 1e-3)


def test_a_case_whose_reference_output_is_not_finite_is_skipped_unless_trial_0s_was_not() -> None:
    finite, broken = torch.ones(4), torch.tensor([1.0, float("nan"), 2.0, 3.0])
    reason = skip_reason([broken], [finite])
    assert reason is not None and "not finite" in reason
    assert skip_reason([broken], [broken]) is None  # the op makes NaN anyway: compared
    assert skip_reason([torch.zeros(4)], [finite]) is None  # zeros are a fine answer
    assert skip_reason([torch.arange(4)], [torch.arange(4)]) is None  # integers


def test_a_case_whose_reference_output_is_all_subnormal_is_skipped() -> None:
    tiny = torch.full((8,), 1e-6, dtype=torch.float16)  # below float16's normal range
    reason = skip_reason([tiny], [torch.ones(8, dtype=torch.float16)])
    assert reason is not None and "normal range of float16" in reason
    assert skip_reason([tiny.float()], [torch.ones(8)]) is None  # normal in float32


def test_atol_follows_the_outputs_magnitude_with_a_floor_of_subnormal_units() -> None:
    nominal = [torch.tensor([4.0, -2.0])]
    assert atol_scales([torch.tensor([4e-3, 1e-3])], nominal, None) == pytest.approx([1e-3])
    assert atol_scales([torch.tensor([-4e3, 1.0])], nominal, None) == pytest.approx([1e3])
    floor = atol_scales([torch.zeros(2)], nominal, None)[0]
    info = torch.finfo(torch.float32)
    assert floor * 1e-3 == pytest.approx(2 * info.smallest_normal * info.eps)  # float32 atol
    assert atol_scales([torch.ones(2)], [torch.zeros(2)], None) == [1.0]  # nothing to go by
    assert atol_scales([torch.arange(2)], [torch.arange(2)], None) == [1.0]  # exact anyway
    assert atol_scales([torch.ones(2)], None, None) == [1.0]  # a size of its own


def test_an_answer_of_zeros_fails_at_1e_minus_3_where_the_unscaled_atol_would_pass_it() -> None:
    nominal = torch.rand(1024) * 1.8 - 0.9
    want = nominal * 1e-3  # every element below the request's atol of 1e-3
    lazy = torch.zeros(1024)
    case = judged("scale_1e-3", "scale", [lazy], [want], [nominal], atol=1e-3, rtol=1e-3)
    assert case.status == "failed" and case.reason is not None
    assert case.atol == pytest.approx(1e-3 * float(want.abs().max() / nominal.abs().max()))
    unscaled = judged("scale_1e-3", "scale", [lazy], [want], None, atol=1e-3, rtol=1e-3)
    assert unscaled.status == "passed"  # what the scaling is for


def test_an_honest_answer_passes_at_1e3_where_the_unscaled_atol_would_fail_it() -> None:
    torch.manual_seed(0)
    a, b = torch.randn(64, 512), torch.randn(512, 64)
    nominal = a @ b
    want = (a * 1e3) @ (b * 1e3)
    # the same product summed in another order: float32 rounding at the output's scale
    got = ((a * 1e3).double() @ (b * 1e3).double()).float()
    case = judged("scale_1e3", "scale", [got], [want], [nominal], atol=None, rtol=None)
    assert case.status == "passed", case.reason
    assert case.max_abs_error is not None and case.max_abs_error > 1e-3
    unscaled = judged("scale_1e3", "scale", [got], [want], None, atol=None, rtol=None)
    assert unscaled.status == "failed"


def test_the_worst_errors_say_where_they_are() -> None:
    want = [torch.ones(2, 3), torch.tensor([0.0, 4.0])]
    got = [torch.ones(2, 3), torch.tensor([0.5, 5.0])]
    got[0][1, 2] = 1.25
    worst = worst_error(got, want)
    assert worst.max_abs == pytest.approx(1.0) and worst.abs_at == [1, 1]
    # relative where the reference is not zero: 0.25 / 1 beats 1 / 4, and 0.5 / 0 is left out
    assert worst.max_rel == pytest.approx(0.25) and worst.rel_at == [0, 1, 2]
    nan = worst_error([torch.tensor([float("nan"), 1.0])], [torch.tensor([1.0, 1.0])])
    assert nan.max_abs == 0.0 and nan.abs_at == [0, 1]  # (the comparison reports the NaN)


def test_the_report_counts_its_cases() -> None:
    cases = [RobustnessCase(name=n, kind="scale", status=s)  # type: ignore[arg-type]
             for n, s in (("a", "passed"), ("b", "failed"), ("c", "skipped"), ("d", "passed"))]
    report = RobustnessReport.of(cases, "none declared", 12.3456)
    assert (report.passed, report.failed, report.skipped) == (2, 1, 1)
    assert report.all_passed is False and report.spent_ms == 12.346
    assert RobustnessReport.of(cases[2:3], "").all_passed is True  # nothing failed
