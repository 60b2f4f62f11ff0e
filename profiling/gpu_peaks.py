"""Peak DRAM bandwidth and dense FLOP rates per dtype of the GPUs the server meets.

:func:`peaks_for` finds a GPU's row from the name torch gives it
(``torch.cuda.get_device_name()``, which the server's device probe records): ``"NVIDIA H200"``,
``"NVIDIA H100 80GB HBM3"``, ``"NVIDIA A100-SXM4-80GB"``, ``"Tesla V100-SXM2-32GB"``. Names
are matched case-blind, on words, most specific row first; an unknown name finds None.

The figures are the vendor's datasheet peaks at boost clock: DRAM bandwidth in bytes per
second, and FLOP (or integer op) rates per second for ``fp64``, ``fp32``, ``tf32``, ``fp16``,
``bf16``, ``fp8`` and ``int8``. Tensor-core rates are the dense ones (a datasheet's "with
sparsity" figure halved); ``fp64`` is the FP64 tensor-core rate where the GPU has one (a
matmul's), ``fp32`` the CUDA cores' (no tensor core takes plain FP32); ``fp16``/``bf16``/
``fp8`` of a GeForce card are those with FP32 accumulation (what torch's matmuls ask for). A
dtype the datasheet gives no figure for is absent. No kernel reaches these figures: they are
the roof that speed-of-light fractions (:mod:`profiling.sol`) are taken of.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")
TERA = 1e12


@dataclass(frozen=True)
class DevicePeaks:
    """One GPU's peak figures: DRAM bytes per second and FLOP/s per dtype (see the module
    docstring); ``source`` says where they come from."""

    row: str
    dram_bytes_per_s: float
    flops_per_s: Mapping[str, float] = field(default_factory=dict)
    source: str = ""


def _row(row: str, tb_s: float, source: str, **tflops: float) -> DevicePeaks:
    unknown = set(tflops) - set(DTYPES)
    assert not unknown, unknown
    return DevicePeaks(row, tb_s * TERA, {k: v * TERA for k, v in tflops.items()}, source)


# (pattern on the normalised name, row): the first match wins, so the specific rows go first.
# Sources: nvidia.com datasheets; "sparse/2" marks tensor figures halved from the datasheet's.
_TABLE: tuple[tuple[str, DevicePeaks], ...] = (
    # NVIDIA GB200 NVL72 and HGX B200 specification tables (nvidia.com/en-us/data-center), sparse/2
    (r"\bgb200\b", _row("GB200", 8.0, "NVIDIA GB200 NVL72 datasheet, per GPU",
                        fp64=40, fp32=80, tf32=1250, fp16=2500, bf16=2500, fp8=5000, int8=5000)),
    (r"\bb200\b", _row("B200 (HGX)", 7.7, "NVIDIA HGX B200 datasheet, per GPU",
                       fp64=37, fp32=75, tf32=1100, fp16=2250, bf16=2250, fp8=4500, int8=4500)),
    # NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200), SXM and NVL columns, sparse/2
    (r"\bh200 nvl\b", _row("H200 NVL", 4.8, "NVIDIA H200 datasheet, NVL",
                           fp64=60, fp32=60, tf32=417.5, fp16=835.5, bf16=835.5, fp8=1670.5,
                           int8=1670.5)),
    (r"\bh200\b", _row("H200 SXM", 4.8, "NVIDIA H200 datasheet, SXM",
                       fp64=67, fp32=67, tf32=494.5, fp16=989.5, bf16=989.5, fp8=1979,
                       int8=1979)),
    # NVIDIA GH200 datasheet: the H100 SXM's compute; 96 GB HBM3 at 4 TB/s, 144 GB HBM3e at 4.9 TB/s
    (r"\bgh200\b.*\b144", _row("GH200 144GB HBM3e", 4.9, "NVIDIA GH200 datasheet",
                               fp64=67, fp32=67, tf32=494.5, fp16=989.5, bf16=989.5, fp8=1979,
                               int8=1979)),
    (r"\bgh200\b", _row("GH200 96GB HBM3", 4.0, "NVIDIA GH200 datasheet",
                        fp64=67, fp32=67, tf32=494.5, fp16=989.5, bf16=989.5, fp8=1979,
                        int8=1979)),
    # NVIDIA H100 datasheet (nvidia.com/en-us/data-center/h100), SXM, PCIe and NVL columns, sparse/2
    (r"\bh100 nvl\b", _row("H100 NVL", 3.9, "NVIDIA H100 datasheet, NVL",
                           fp64=60, fp32=60, tf32=417.5, fp16=835.5, bf16=835.5, fp8=1670.5,
                           int8=1670.5)),
    (r"\bh100\b.*\bpcie\b", _row("H100 PCIe", 2.0, "NVIDIA H100 datasheet, PCIe",
                                 fp64=51, fp32=51, tf32=378, fp16=756.5, bf16=756.5,
                                 fp8=1513, int8=1513)),
    (r"\bh100\b", _row("H100 SXM", 3.35, "NVIDIA H100 datasheet, SXM",
                       fp64=67, fp32=67, tf32=494.5, fp16=989.5, bf16=989.5, fp8=1979,
                       int8=1979)),
    # NVIDIA H800 product brief: the H100's tensor rates, FP64 cut to 1 TFLOPS; sparse/2
    (r"\bh800\b.*\bpcie\b", _row("H800 PCIe", 2.0, "NVIDIA H800 PCIe product brief",
                                 fp64=0.8, fp32=51, tf32=378, fp16=756.5, bf16=756.5,
                                 fp8=1513, int8=1513)),
    (r"\bh800\b", _row("H800 SXM", 3.35, "NVIDIA H800 SXM product brief",
                       fp64=1, fp32=67, tf32=494.5, fp16=989.5, bf16=989.5, fp8=1979,
                       int8=1979)),
    # NVIDIA H20 specification (no nvidia.com datasheet: as NVIDIA's partners publish it), dense
    (r"\bh20\b", _row("H20", 4.0, "NVIDIA H20 specification as published by its partners",
                      fp64=1, fp32=44, tf32=74, fp16=148, bf16=148, fp8=296, int8=296)),
    # NVIDIA A100 datasheet (nvidia.com/en-us/data-center/a100): dense columns; bandwidth per model
    (r"\ba100\b.*\bpcie\b.*\b80\s?gb\b|\ba100\b.*\b80\s?gb\b.*\bpcie\b",
     _row("A100 80GB PCIe", 1.935, "NVIDIA A100 datasheet, 80GB PCIe",
          fp64=19.5, fp32=19.5, tf32=156, fp16=312, bf16=312, int8=624)),
    (r"\ba100\b.*\bpcie\b", _row("A100 40GB PCIe", 1.555, "NVIDIA A100 datasheet, 40GB PCIe",
                                 fp64=19.5, fp32=19.5, tf32=156, fp16=312, bf16=312, int8=624)),
    (r"\ba100\b.*\b80\s?gb\b", _row("A100 80GB SXM", 2.039, "NVIDIA A100 datasheet, 80GB SXM",
                                    fp64=19.5, fp32=19.5, tf32=156, fp16=312, bf16=312,
                                    int8=624)),
    (r"\ba100\b", _row("A100 40GB SXM", 1.555, "NVIDIA A100 datasheet, 40GB SXM",
                       fp64=19.5, fp32=19.5, tf32=156, fp16=312, bf16=312, int8=624)),
    # NVIDIA A30 datasheet, dense
    (r"\ba30\b", _row("A30", 0.933, "NVIDIA A30 datasheet",
                      fp64=10.3, fp32=10.3, tf32=82, fp16=165, bf16=165, int8=330)),
    # NVIDIA A40 datasheet, dense
    (r"\ba40\b", _row("A40", 0.696, "NVIDIA A40 datasheet",
                      fp32=37.4, tf32=74.8, fp16=149.7, bf16=149.7, int8=299.3)),
    # NVIDIA A10 datasheet, dense; the A10G (AWS G5, no datasheet of its own) taken as the A10
    (r"\ba10g\b", _row("A10G", 0.6, "NVIDIA A10 datasheet (AWS G5: the A10G is its variant)",
                       fp32=31.2, tf32=62.5, fp16=125, bf16=125, int8=250)),
    (r"\ba10\b", _row("A10", 0.6, "NVIDIA A10 datasheet",
                      fp32=31.2, tf32=62.5, fp16=125, bf16=125, int8=250)),
    # NVIDIA L40S datasheet, dense
    (r"\bl40s\b", _row("L40S", 0.864, "NVIDIA L40S datasheet",
                       fp32=91.6, tf32=183, fp16=362.05, bf16=362.05, fp8=733, int8=733)),
    # NVIDIA L40 datasheet, dense
    (r"\bl40\b", _row("L40", 0.864, "NVIDIA L40 datasheet",
                      fp32=90.5, tf32=90.5, fp16=181.05, bf16=181.05, fp8=362, int8=362)),
    # NVIDIA L4 datasheet, sparse/2
    (r"\bl4\b", _row("L4", 0.3, "NVIDIA L4 datasheet",
                     fp32=30.3, tf32=60, fp16=121, bf16=121, fp8=242.5, int8=242.5)),
    # NVIDIA Ada Lovelace architecture whitepaper, appendix A (RTX 6000 Ada), dense
    (r"\brtx 6000 ada\b", _row("RTX 6000 Ada", 0.96, "NVIDIA Ada Lovelace whitepaper",
                               fp32=91.1, tf32=182.1, fp16=364.2, bf16=364.2, fp8=728.5,
                               int8=728.5)),
    # NVIDIA Ada Lovelace architecture whitepaper, appendix A (RTX 4090), dense, FP32 accumulate
    (r"\brtx 4090\b", _row("RTX 4090", 1.008, "NVIDIA Ada Lovelace whitepaper",
                           fp32=82.6, tf32=82.6, fp16=165.2, bf16=165.2, fp8=330.3,
                           int8=660.6)),
    # NVIDIA Ampere GA102 whitepaper, appendix A (RTX A6000), dense
    (r"\brtx a6000\b", _row("RTX A6000", 0.768, "NVIDIA Ampere GA102 whitepaper",
                            fp32=38.7, tf32=77.4, fp16=154.8, bf16=154.8, int8=309.7)),
    # NVIDIA Ampere GA102 whitepaper, appendix A (RTX 3090), dense, FP32 accumulate
    (r"\brtx 3090\b", _row("RTX 3090", 0.936, "NVIDIA Ampere GA102 whitepaper",
                           fp32=35.6, tf32=35.6, fp16=71, bf16=71, int8=284)),
    # NVIDIA V100 datasheet (nvidia.com/en-us/data-center/v100): V100S PCIe, V100 PCIe, V100 SXM2
    (r"\bv100s\b", _row("V100S PCIe", 1.134, "NVIDIA V100 datasheet, V100S PCIe",
                        fp64=8.2, fp32=16.4, fp16=130)),
    (r"\bv100\b.*\bpcie\b", _row("V100 PCIe", 0.9, "NVIDIA V100 datasheet, PCIe",
                                 fp64=7, fp32=14, fp16=112)),
    (r"\bv100\b", _row("V100 SXM2", 0.9, "NVIDIA V100 datasheet, SXM2",
                       fp64=7.8, fp32=15.7, fp16=125)),
    # NVIDIA T4 datasheet
    (r"\bt4\b", _row("T4", 0.32, "NVIDIA T4 datasheet", fp32=8.1, fp16=65, int8=130)),
)
_COMPILED = tuple((re.compile(pattern), peaks) for pattern, peaks in _TABLE)


def normalised(name: str) -> str:
    """``name`` lower-case, its punctuation spaces, the vendor words gone:
    ``"NVIDIA A100-SXM4-80GB"`` → ``"a100 sxm4 80gb"``."""
    words = re.sub(r"[^a-z0-9]+", " ", name.lower()).split()
    return " ".join(w for w in words if w not in ("nvidia", "tesla", "geforce"))


def peaks_for(device_name: str | None) -> DevicePeaks | None:
    """The peak figures of the GPU torch names ``device_name``, or None when no row knows it
    (a MIG slice too: it has a part of its GPU's figures)."""
    if not device_name:
        return None
    name = normalised(device_name)
    if "mig" in name.split():
        return None
    for pattern, peaks in _COMPILED:
        if pattern.search(name):
            return peaks
    return None


def table_rows() -> list[DevicePeaks]:
    """Every row of the table, in matching order."""
    return [peaks for _, peaks in _TABLE]
