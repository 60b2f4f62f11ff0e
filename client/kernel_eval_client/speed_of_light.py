"""``metadata.speed_of_light``: how far a kernel is from the roofline bound of its problem.

The server builds it (``profiling/sol.py``) from the bytes the problem moves, the FLOPs the
judge counted in the reference (or the request's ``problem_size``), the GPU's peak figures,
and the candidate's and the reference's medians; where Nsight Compute ran, its measured
fractions replace the estimated ones (``speed_of_light: "exact"``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

SCORE_DEFINITION = (
    "SOL-ExecBench's S = 1 / (1 + (T - T_sol) / (T_ref - T_sol)) "
    "(github.com/NVIDIA/SOL-ExecBench, src/sol_execbench/sol_score.py), the reference as T_b"
)

class PeaksUsed(BaseModel):
    """The peak figures a bound was computed from."""

    row: str  # the table's row (profiling.gpu_peaks), or what the caller named them
    source: str
    dram_gb_s: float  # 10^9 bytes per second
    tflops: dict[str, float] = Field(default_factory=dict)  # per dtype the bound used, 10^12/s


class SpeedOfLight(BaseModel):
    """A kernel's distance from the roofline bound of its problem (see the module docstring).

    Times are milliseconds; fractions are 0..1 (above 1: the kernel beat the estimated bound,
    which then is no bound: see ``notes``). ``*_source`` says where each input came from:
    ``bytes_source`` "io" (the reference's inputs, parameters and outputs on trial 0) or
    "hint" (the request's problem_size); ``flops_source`` "counted" (the judge's FLOP counter),
    "hint" or "unknown"; ``fractions_source`` "roofline" or "ncu".
    """

    speed_of_light: Literal["estimated", "exact"] = "estimated"
    device: str | None = None
    peaks: PeaksUsed | None = None
    bytes: int | None = None
    bytes_source: Literal["io", "hint"] | None = None
    flops: int | None = None
    flops_source: Literal["counted", "hint", "unknown"] = "unknown"
    flops_by_dtype: dict[str, int] = Field(default_factory=dict)
    dtype: str | None = None
    dtype_source: Literal["counted", "inputs", "hint"] | None = None
    memory_bound_ms: float | None = None
    compute_bound_ms: float | None = None
    bound_ms: float | None = None
    bound: Literal["memory", "compute"] | None = None
    candidate_ms: float | None = None
    reference_ms: float | None = None
    memory_fraction: float | None = None
    compute_fraction: float | None = None
    fractions_source: Literal["roofline", "ncu"] = "roofline"
    # with ncu's fractions: the ncu metric each came from, and the roofline's beside them
    ncu_metrics: dict[str, str] = Field(default_factory=dict)
    roofline_memory_fraction: float | None = None
    roofline_compute_fraction: float | None = None
    score: float | None = None
    score_definition: str = SCORE_DEFINITION
    notes: list[str] = Field(default_factory=list)
    count_ms: float | None = None  # what counting the reference's work cost the job (wall time)


__all__ = ["SCORE_DEFINITION", "PeaksUsed", "SpeedOfLight"]
