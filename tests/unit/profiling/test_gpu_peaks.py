"""The peak-figure table: found by the names torch gives GPUs, dense figures, known dtypes."""

from __future__ import annotations

import typing

import pytest
from kernel_eval_client.models import ProblemSize

from profiling.gpu_peaks import DTYPES, TERA, normalised, peaks_for, table_rows

# torch.cuda.get_device_name() of real GPUs -> the row it must find
NAMES = [
    ("NVIDIA H200", "H200 SXM"),
    ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H800", "H800 SXM"),
    ("NVIDIA H20", "H20"),
    ("NVIDIA GH200 480GB", "GH200 96GB HBM3"),
    ("NVIDIA GH200 144G HBM3e", "GH200 144GB HBM3e"),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
    ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM"),
    ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe"),
    ("NVIDIA A10", "A10"),
    ("NVIDIA A10G", "A10G"),
    ("NVIDIA A30", "A30"),
    ("NVIDIA A40", "A40"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA L40", "L40"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA B200", "B200 (HGX)"),
    ("NVIDIA GB200", "GB200"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    ("NVIDIA GeForce RTX 3090", "RTX 3090"),
    ("NVIDIA RTX A6000", "RTX A6000"),
    ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"),
    ("Tesla V100-SXM2-32GB", "V100 SXM2"),
    ("Tesla V100-PCIE-16GB", "V100 PCIe"),
    ("Tesla V100S-PCIE-32GB", "V100S PCIe"),
    ("Tesla T4", "T4"),
]


@pytest.mark.parametrize(("name", "row"), NAMES)
def test_a_gpu_is_found_by_the_name_torch_gives_it(name: str, row: str) -> None:
    peaks = peaks_for(name)
    assert peaks is not None and peaks.row == row


@pytest.mark.parametrize("name", [None, "", "cpu", "NVIDIA Quadro K600", "AMD Instinct MI300X",
                                  "NVIDIA A100-SXM4-40GB MIG 1g.5gb"])
def test_an_unknown_gpu_or_a_mig_slice_has_no_figures(name: str | None) -> None:
    assert peaks_for(name) is None


def test_names_are_matched_on_words_not_substrings() -> None:
    assert normalised("NVIDIA A100-SXM4-80GB") == "a100 sxm4 80gb"
    # "h20" is in "h200", "a10" in "a100", "l4" in "l40", "b200" in "gb200": each finds its own
    assert [peaks_for(n).row for n in ("NVIDIA H20", "NVIDIA A10", "NVIDIA L4",  # type: ignore[union-attr]
                                       "NVIDIA B200")] == ["H20", "A10", "L4", "B200 (HGX)"]


def test_figures_are_the_dense_datasheet_ones() -> None:
    h100 = peaks_for("NVIDIA H100 80GB HBM3")
    assert h100 is not None
    assert h100.dram_bytes_per_s == pytest.approx(3.35 * TERA)
    # the datasheet's 1979 TFLOPS bf16 is with sparsity: dense is half
    assert h100.flops_per_s["bf16"] == pytest.approx(989.5 * TERA)
    assert h100.flops_per_s["fp8"] == pytest.approx(2 * h100.flops_per_s["bf16"])
    assert h100.flops_per_s["tf32"] == pytest.approx(h100.flops_per_s["bf16"] / 2, rel=1e-3)
    a100 = peaks_for("NVIDIA A100-SXM4-80GB")
    assert a100 is not None and "fp8" not in a100.flops_per_s  # Ampere has no FP8 tensor cores


def test_every_row_is_complete_and_plausible() -> None:
    for peaks in table_rows():
        assert set(peaks.flops_per_s) <= set(DTYPES), peaks.row
        assert 0.25e12 <= peaks.dram_bytes_per_s <= 10e12, peaks.row
        assert "fp32" in peaks.flops_per_s and "fp16" in peaks.flops_per_s, peaks.row
        assert peaks.source, peaks.row
        # tensor cores run fp16 at least as fast as CUDA cores run fp32
        assert peaks.flops_per_s["fp16"] >= peaks.flops_per_s["fp32"], peaks.row


def test_the_requests_dtype_choices_are_the_tables_dtypes() -> None:
    dtype = typing.get_type_hints(ProblemSize)["dtype"]
    literal = next(arg for arg in typing.get_args(dtype) if arg is not type(None))
    assert typing.get_args(literal) == DTYPES
