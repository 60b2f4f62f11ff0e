"""Speed of light: the roofline bound, the fractions of it, SOL-ExecBench's score, and where
each input came from."""

from __future__ import annotations

import json

import pytest
from kernel_eval_client.models import ProblemSize

from profiling.device_metrics import DeviceMetricsResult
from profiling.gpu_peaks import TERA, DevicePeaks, peaks_for
from profiling.sol import (
    SpeedOfLight,
    compute_bound_s,
    ncu_fractions,
    sol_score,
    speed_of_light,
)
from shared.observations import ProblemWork

H200 = "NVIDIA H200"
# a toy GPU with round figures: 1 TB/s, 100 TFLOP/s bf16, 10 TFLOP/s fp32
TOY = DevicePeaks("toy", 1 * TERA, {"bf16": 100 * TERA, "fp32": 10 * TERA}, "test")


def matmul_work(n: int = 8192, dtype: str = "bf16", size: int = 2) -> ProblemWork:
    """An n x n by n x n matmul's work as the judge counts it."""
    return ProblemWork(flops=2 * n**3, flops_by_dtype={dtype: 2 * n**3}, dtype=dtype,
                       dtype_source="counted", read_bytes=2 * n * n * size,
                       written_bytes=n * n * size)


# ---- the score ---------------------------------------------------------------------------------


def test_score_is_half_at_the_baseline_and_one_at_the_bound() -> None:
    assert sol_score(t_k=2.0, t_b=2.0, t_sol=0.5) == pytest.approx(0.5)
    assert sol_score(t_k=0.5, t_b=2.0, t_sol=0.5) == pytest.approx(1.0)


def test_score_is_sol_execbenchs_formula() -> None:
    # S = 1 / (1 + (T_k - T_sol) / (T_b - T_sol)), between the anchors and beyond them
    for t_k, expected in ((1.0, 1 / (1 + 0.5 / 1.5)), (4.0, 1 / (1 + 3.5 / 1.5)),
                          (0.4, 1 / (1 - 0.1 / 1.5))):
        assert sol_score(t_k, 2.0, 0.5) == pytest.approx(expected)
    assert sol_score(3.0, 2.0, 0.5) < 0.5 < sol_score(1.5, 2.0, 0.5) < 1.0
    assert sol_score(0.4, 2.0, 0.5) > 1.0  # faster than the bound: unclipped, as defined


def test_score_where_the_baseline_is_at_the_bound_or_the_formula_has_no_value() -> None:
    # SOL-ExecBench: a baseline no slower than the bound gives 1 at or under it, else 0
    assert sol_score(0.5, 0.5, 0.5) == 1.0
    assert sol_score(0.6, 0.4, 0.5) == 0.0
    # 1 + (t_k - t_sol) / (t_b - t_sol) <= 0: far under the bound, no score
    assert sol_score(0.1, 1.0, 0.6) is None


# ---- the roofline ------------------------------------------------------------------------------


def test_a_matmul_is_compute_bound_and_its_fractions_are_bound_over_time() -> None:
    work = matmul_work()
    block = speed_of_light(H200, 2.0, reference_ms=4.0, work=work)
    flops, nbytes = 2 * 8192**3, 3 * 8192 * 8192 * 2
    compute_ms = flops / 989.5e12 * 1e3
    memory_ms = nbytes / 4.8e12 * 1e3
    assert block.bound == "compute"
    assert block.compute_bound_ms == pytest.approx(compute_ms)
    assert block.memory_bound_ms == pytest.approx(memory_ms)
    assert block.bound_ms == pytest.approx(compute_ms)
    # achieved FLOP/s over peak, achieved bytes/s over peak
    assert block.compute_fraction == pytest.approx(flops / 2e-3 / 989.5e12)
    assert block.memory_fraction == pytest.approx(nbytes / 2e-3 / 4.8e12)
    assert block.score == pytest.approx(sol_score(2.0, 4.0, compute_ms))
    assert (block.speed_of_light, block.fractions_source) == ("estimated", "roofline")
    assert (block.flops_source, block.bytes_source, block.dtype_source) == \
        ("counted", "io", "counted")
    assert block.peaks is not None and block.peaks.row == "H200 SXM"
    assert block.peaks.tflops == {"bf16": pytest.approx(989.5)}
    assert block.peaks.dram_gb_s == pytest.approx(4800)


def test_flop_rates_follow_the_sm_clock_the_kernel_ran_at_and_bandwidth_does_not() -> None:
    full = speed_of_light(H200, 2.0, work=matmul_work())
    held = speed_of_light(H200, 2.0, work=matmul_work(), sm_clock_mhz=(1485.0, 1980.0))
    assert held.compute_bound_ms == pytest.approx(full.compute_bound_ms / 0.75)
    assert held.compute_fraction == pytest.approx(full.compute_fraction / 0.75)
    assert held.memory_bound_ms == pytest.approx(full.memory_bound_ms)
    assert any("1485 of 1980 MHz" in note for note in held.notes)
    at_top = speed_of_light(H200, 2.0, work=matmul_work(), sm_clock_mhz=(1980.0, 1980.0))
    assert at_top.compute_bound_ms == pytest.approx(full.compute_bound_ms)


def test_a_copy_is_memory_bound() -> None:
    work = ProblemWork(flops=0, read_bytes=2**28, written_bytes=2**28, dtype="fp32",
                       dtype_source="inputs")
    block = speed_of_light(None, 0.12, reference_ms=0.2, work=work, peaks=TOY)
    assert block.bound == "memory" and block.compute_bound_ms == 0.0
    assert block.bound_ms == pytest.approx(2**29 / 1e12 * 1e3)
    assert block.memory_fraction == pytest.approx(2**29 / 0.12e-3 / 1e12)
    assert block.compute_fraction == 0.0
    # counted 0 FLOPs: said why (elementwise ops count 0)
    assert any("elementwise" in note for note in block.notes)


def test_the_block_says_what_counting_the_work_cost_and_nothing_where_none_was_counted() -> None:
    work = ProblemWork(flops=0, read_bytes=2**20, dtype="fp32", dtype_source="inputs",
                       count_ms=3.25)
    assert speed_of_light(None, 0.1, work=work, peaks=TOY).count_ms == 3.25
    hinted = speed_of_light(None, 0.1, io_bytes=2**20, peaks=TOY,
                            hints=ProblemSize(bytes=2**20, flops=10**9))
    assert hinted.count_ms is None


def test_the_score_is_half_when_the_candidate_runs_as_fast_as_the_reference() -> None:
    block = speed_of_light(H200, 3.0, reference_ms=3.0, work=matmul_work())
    assert block.score == pytest.approx(0.5)


def test_the_score_is_one_when_the_candidate_runs_at_the_bound() -> None:
    bound_ms = speed_of_light(H200, 1.0, work=matmul_work()).bound_ms
    assert bound_ms is not None
    block = speed_of_light(H200, bound_ms, reference_ms=3.0, work=matmul_work())
    assert block.score == pytest.approx(1.0)
    assert block.compute_fraction == pytest.approx(1.0)


def test_flops_in_several_dtypes_take_each_dtypes_rate() -> None:
    assert compute_bound_s({"bf16": 100 * TERA, "fp32": 10 * TERA}, TOY) == pytest.approx(2.0)
    assert compute_bound_s({"fp8": 1}, TOY) is None  # no fp8 figure: no compute bound


def test_no_figure_for_the_work_dtype_leaves_the_memory_bound_alone() -> None:
    work = ProblemWork(flops=10**12, flops_by_dtype={"fp8": 10**12}, dtype="fp8",
                       dtype_source="counted", read_bytes=10**9)
    block = speed_of_light(None, 10.0, work=work, peaks=TOY)
    assert block.compute_bound_ms is None and block.compute_fraction is None
    assert block.bound == "memory" and block.bound_ms == pytest.approx(1.0)
    assert any("no fp8 peak known for toy" in note for note in block.notes)


def test_an_unknown_device_gives_the_problem_but_no_bound() -> None:
    block = speed_of_light("NVIDIA Quadro K600", 1.0, reference_ms=2.0, work=matmul_work())
    assert block.peaks is None and block.bound_ms is None and block.score is None
    assert block.memory_fraction is None and block.compute_fraction is None
    assert block.flops == 2 * 8192**3 and block.bytes == 3 * 8192**2 * 2
    assert "no peak figures known for NVIDIA Quadro K600" in block.notes


def test_a_kernel_faster_than_the_bound_is_said_to_be() -> None:
    work = ProblemWork(flops=0, read_bytes=10**9, dtype="fp32", dtype_source="inputs")
    block = speed_of_light(None, 0.5, reference_ms=2.0, work=work, peaks=TOY)  # bound: 1 ms
    assert block.memory_fraction == pytest.approx(2.0)
    assert block.score is not None and block.score > 1.0
    assert any("faster than the estimated bound" in note for note in block.notes)


# ---- where the numbers come from ---------------------------------------------------------------


def test_hints_override_what_was_counted() -> None:
    hints = ProblemSize(flops=4 * 10**12, bytes=2 * 10**9, dtype="fp32")
    block = speed_of_light(None, 1000.0, work=matmul_work(), hints=hints, peaks=TOY)
    assert (block.flops, block.flops_source) == (4 * 10**12, "hint")
    assert (block.bytes, block.bytes_source) == (2 * 10**9, "hint")
    assert (block.dtype, block.dtype_source) == ("fp32", "hint")
    assert block.flops_by_dtype == {"fp32": 4 * 10**12}
    assert block.compute_bound_ms == pytest.approx(400.0)  # 4e12 at 10 TFLOP/s
    assert block.memory_bound_ms == pytest.approx(2.0)


def test_a_hint_of_one_figure_leaves_the_other_counted() -> None:
    block = speed_of_light(None, 10.0, work=matmul_work(1024), hints=ProblemSize(bytes=10**10),
                           peaks=TOY)
    assert (block.bytes_source, block.flops_source) == ("hint", "counted")
    assert block.flops == 2 * 1024**3 and block.dtype == "bf16"
    block = speed_of_light(None, 10.0, work=matmul_work(1024), hints=ProblemSize(flops=10**12),
                           peaks=TOY)
    # hinted FLOPs without a dtype run at the counted dtype's rate
    assert (block.flops_source, block.bytes_source, block.dtype) == ("hint", "io", "bf16")
    assert block.compute_bound_ms == pytest.approx(10.0)


def test_uncounted_flops_are_unknown_with_the_reason() -> None:
    work = ProblemWork(read_bytes=10**9, reason="the reference is a triton kernel: ...",
                       dtype="fp16", dtype_source="inputs")
    block = speed_of_light(None, 2.0, reference_ms=4.0, work=work, peaks=TOY)
    assert (block.flops, block.flops_source) == (None, "unknown")
    assert block.bound == "memory" and block.score == pytest.approx(sol_score(2.0, 4.0, 1.0))
    assert any("the reference is a triton kernel" in note for note in block.notes)


def test_without_the_judges_count_the_io_bytes_serve() -> None:
    block = speed_of_light(None, 2.0, io_bytes=10**9, peaks=TOY)
    assert (block.bytes, block.bytes_source, block.flops_source) == (10**9, "io", "unknown")
    assert block.bound_ms == pytest.approx(1.0)


# ---- ncu -----------------------------------------------------------------------------------------


def ncu_result(**categories: dict[str, float]) -> DeviceMetricsResult:
    return DeviceMetricsResult(available=True, **categories)  # type: ignore[arg-type]


def test_where_ncu_ran_the_fractions_are_its_own() -> None:
    ncu = ncu_result(speed_of_light={"dram_throughput_pct": 12.5, "compute_throughput_pct": 80.0},
                     pipeline_metrics={"tensor_pipe_active_pct": 71.0})
    block = speed_of_light(H200, 2.0, reference_ms=4.0, work=matmul_work(), ncu=ncu)
    assert (block.speed_of_light, block.fractions_source) == ("exact", "ncu")
    assert block.memory_fraction == pytest.approx(0.125)
    # bf16 work: the tensor pipe is its roof
    assert block.compute_fraction == pytest.approx(0.71)
    assert block.ncu_metrics["compute_fraction"].startswith("sm__pipe_tensor")
    assert block.ncu_metrics["memory_fraction"].startswith("dram__throughput")
    estimate = speed_of_light(H200, 2.0, reference_ms=4.0, work=matmul_work())
    assert block.roofline_compute_fraction == pytest.approx(estimate.compute_fraction)
    assert block.score == pytest.approx(estimate.score)  # the bound stays the roofline's


def test_ncu_without_tensor_figures_or_for_fp32_work_gives_the_sm_throughput() -> None:
    ncu = ncu_result(speed_of_light={"dram_throughput_pct": 90.0, "compute_throughput_pct": 20.0},
                     pipeline_metrics={"tensor_pipe_active_pct": 0.0})
    fractions = ncu_fractions(ncu, "fp32")
    assert fractions is not None
    assert fractions.compute_fraction == pytest.approx(0.2)
    assert fractions.metrics["compute_fraction"].startswith("sm__throughput")
    basic = ncu_fractions(ncu_result(speed_of_light={"compute_throughput_pct": 55.0}), "bf16")
    assert basic is not None and basic.compute_fraction == pytest.approx(0.55)
    assert basic.memory_fraction is None


def test_ncu_that_did_not_run_leaves_the_estimate() -> None:
    failed = DeviceMetricsResult.unavailable("ncu was not found")
    block = speed_of_light(H200, 2.0, work=matmul_work(), ncu=failed)
    assert block.speed_of_light == "estimated" and not block.ncu_metrics
    assert ncu_fractions(ncu_result(), "bf16") is None  # ran, reported nothing of use


def test_the_block_is_plain_json() -> None:
    block = speed_of_light(H200, 2.0, reference_ms=4.0, work=matmul_work())
    again = SpeedOfLight.model_validate(json.loads(block.model_dump_json()))
    assert again == block
    assert peaks_for(H200) is not None
