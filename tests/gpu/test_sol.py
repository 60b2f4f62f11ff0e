"""The judge's FLOP count and the speed-of-light block on a GPU: a bf16 matmul counted in bf16,
a float32 one in TF32 where torch allows it, and the estimated fractions of a measured matmul
and copy within what a GPU can reach (bench/sol_vs_ncu.py sets them beside ncu's)."""

from __future__ import annotations

import pytest
import torch

from profiling.gpu_peaks import peaks_for
from profiling.sol import speed_of_light
from tests.unit.scripts.test_sol_vs_ncu import load

pytestmark = pytest.mark.gpu


SOL_VS_NCU = load()
work_of = SOL_VS_NCU.work_of  # the judge's count of a function's work, as of a reference's
median_ms = SOL_VS_NCU.event_median_ms  # the median of CUDA-event samples, the L2 flushed
SAMPLES = 30


def test_matmuls_are_counted_in_the_dtype_they_run_in() -> None:
    n = 1024
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    work = work_of(torch.mm, [a, b])
    assert work.flops == 2 * n**3 and work.flops_by_dtype == {"bf16": 2 * n**3}
    precision = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        assert work_of(torch.mm, [a.float(), b.float()]).dtype == "tf32"
        torch.set_float32_matmul_precision("highest")
        assert work_of(torch.mm, [a.float(), b.float()]).dtype == "fp32"
    finally:
        torch.set_float32_matmul_precision(precision)


def test_a_measured_matmul_and_copy_reach_plausible_fractions_of_their_bounds() -> None:
    device = torch.cuda.get_device_name(0)
    if peaks_for(device) is None:
        pytest.skip(f"no peak figures known for {device}")
    n = 8192
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    matmul = speed_of_light(device, median_ms(lambda: torch.mm(a, b), SAMPLES),
                            work=work_of(torch.mm, [a, b]))
    assert matmul.bound == "compute" and matmul.flops_source == "counted"
    assert matmul.compute_fraction is not None and 0.3 < matmul.compute_fraction < 1.05
    x = torch.randn(64 * 2**20, device="cuda")  # 256 MB
    copy = speed_of_light(device, median_ms(lambda: x.clone(), SAMPLES),
                          work=work_of(torch.clone, [x]))
    assert copy.bound == "memory" and copy.bytes == 2 * x.numel() * 4
    assert copy.memory_fraction is not None and 0.5 < copy.memory_fraction < 1.05
