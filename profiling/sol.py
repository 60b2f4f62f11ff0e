"""Speed of light: how close a kernel runs to the GPU's roofline bound for its problem.

From what the server knows of a problem (the bytes it must move and the FLOPs it must do,
counted by the judge on the reference, :mod:`judge.flops`, or given in the request's
``problem_size``) and the GPU's peak figures (:mod:`profiling.gpu_peaks`), the roofline bound
of the problem is

    memory_bound = bytes / peak_bandwidth
    compute_bound = sum over dtypes of flops[dtype] / peak_flops[dtype]
    bound = max(memory_bound, compute_bound)

and a kernel that ran in ``T`` reaches ``memory_bound / T`` of the memory bound (its achieved
bytes per second over the peak) and ``compute_bound / T`` of the compute bound; the larger
bound says which of the two dominates. The score is SOL-ExecBench's (:func:`sol_score`) with
the reference as the baseline: 0.5 at the reference's time, 1 at the bound.

These are estimates (``speed_of_light: "estimated"``): a datasheet peak is a little above what
any kernel reaches, bytes are the problem's compulsory traffic (caches that hold it between
calls make a kernel look faster than the bound allows), and FLOPs that the counter cannot see
(elementwise work, a Triton or CUDA reference) are missing, which makes such problems read as
memory-bound. Where Nsight Compute profiled the kernel (device metrics), the fractions are
ncu's measured ones (``"exact"``, :func:`ncu_fractions`); the bound and the score stay the
roofline's.
"""

from __future__ import annotations

from kernel_eval_client.models import ProblemSize
from kernel_eval_client.speed_of_light import PeaksUsed, SpeedOfLight
from pydantic import BaseModel, Field

from profiling.device_metrics import DeviceMetricsResult
from profiling.gpu_peaks import DevicePeaks, peaks_for
from shared.observations import ProblemWork

# Tensor-core dtypes: ncu's tensor pipe is their compute roof (fp64 only where the GPU has
# FP64 tensor cores, which :func:`ncu_fractions` cannot tell: it keeps sm__throughput there).
TENSOR_DTYPES = ("tf32", "fp16", "bf16", "fp8", "int8")
_ELEMENTWISE_NOTE = (
    "the FLOP counter counted 0: it counts matmuls, convolutions and attention, not "
    "elementwise or reduction ops, so this problem is taken as memory-bound (give "
    "problem_size.flops to state its FLOPs)"
)


# ---- the maths -------------------------------------------------------------------------------


def sol_score(t_k: float, t_b: float, t_sol: float) -> float | None:
    """SOL-ExecBench's score of a kernel taking ``t_k`` against a baseline taking ``t_b`` and
    the speed-of-light bound ``t_sol`` (any one unit of time).

    ``S = 1 / (1 + (t_k - t_sol) / (t_b - t_sol))``: 0.5 at the baseline, 1 at the bound,
    towards 0 as the kernel slows; where the baseline is not slower than the bound, 1 for a
    kernel at or under the bound and 0 otherwise. As defined in SOL-ExecBench
    (https://github.com/NVIDIA/SOL-ExecBench, ``src/sol_execbench/sol_score.py``; the paper,
    arXiv:2603.19173). The formula is unclipped: a kernel under an estimated bound
    scores above 1, and one so far under it that ``1 + (t_k - t_sol) / (t_b - t_sol) <= 0``
    has no score (None), where SOL-ExecBench's function would divide by zero or go negative.
    """
    gap = t_b - t_sol
    if gap <= 0:
        return 1.0 if t_k <= t_sol else 0.0
    denominator = 1.0 + (t_k - t_sol) / gap
    return 1.0 / denominator if denominator > 0 else None


def memory_bound_s(nbytes: int, peaks: DevicePeaks) -> float:
    """Seconds the DRAM needs to move ``nbytes`` at its peak."""
    return nbytes / peaks.dram_bytes_per_s


def compute_bound_s(flops_by_dtype: dict[str, int], peaks: DevicePeaks) -> float | None:
    """Seconds the GPU needs for these FLOPs at its peak per dtype; None where a dtype with
    FLOPs has no peak figure."""
    total = 0.0
    for dtype, flops in flops_by_dtype.items():
        if not flops:
            continue
        peak = peaks.flops_per_s.get(dtype)
        if not peak:
            return None
        total += flops / peak
    return total


# ---- ncu's figures ---------------------------------------------------------------------------


class NcuFractions(BaseModel):
    """ncu's measured fractions of the DRAM and compute peaks, and the metrics they came from."""

    memory_fraction: float | None = None
    compute_fraction: float | None = None
    metrics: dict[str, str] = Field(default_factory=dict)


# (category, key, the ncu metric it holds) tried in order for each fraction
_NCU_MEMORY = (
    ("speed_of_light", "dram_throughput_pct", "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
    ("speed_of_light", "gpu_dram_throughput_pct",
     "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
)
_NCU_TENSOR = (
    ("pipeline_metrics", "tensor_pipe_active_pct",
     "sm__pipe_tensor_*cycles_active.avg.pct_of_peak_sustained_active"),
    ("compute_metrics", "tensor_pipe_utilization_pct",
     "sm__inst_executed_pipe_tensor_*.avg.pct_of_peak_sustained_active"),
)
_NCU_SM = (
    ("speed_of_light", "compute_throughput_pct",
     "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
)


def ncu_fractions(ncu: DeviceMetricsResult | None, dtype: str | None) -> NcuFractions | None:
    """The fractions ncu measured for a kernel (its device metrics), meaning what the
    roofline's mean: DRAM throughput over its peak for the memory fraction; for the compute
    fraction the tensor pipe's utilisation where the work is in a tensor-core dtype and the
    preset collected it (``full``), else the busiest SM unit's throughput (``sm__throughput``,
    of every preset). None where ncu did not run or reported neither."""
    if ncu is None or not ncu.available:
        return None
    out = NcuFractions()
    memory = _first_pct(ncu, _NCU_MEMORY)
    if memory is not None:
        out.memory_fraction, out.metrics["memory_fraction"] = memory
    compute = (_first_pct(ncu, _NCU_TENSOR) if dtype in TENSOR_DTYPES else None) \
        or _first_pct(ncu, _NCU_SM)
    if compute is not None:
        out.compute_fraction, out.metrics["compute_fraction"] = compute
    return out if out.metrics else None


def _first_pct(ncu: DeviceMetricsResult,
               places: tuple[tuple[str, str, str], ...]) -> tuple[float, str] | None:
    for category, key, metric in places:
        value = getattr(ncu, category).get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value) / 100.0, metric
    return None


# ---- the block -------------------------------------------------------------------------------


def speed_of_light(
    device_name: str | None,
    candidate_ms: float,
    *,
    reference_ms: float | None = None,
    io_bytes: int | None = None,
    work: ProblemWork | None = None,
    hints: ProblemSize | None = None,
    ncu: DeviceMetricsResult | None = None,
    peaks: DevicePeaks | None = None,
    sm_clock_mhz: tuple[float, float] | None = None,
) -> SpeedOfLight:
    """The ``speed_of_light`` block of a kernel's result.

    ``device_name``: the GPU's name as torch gives it (the table's key); ``candidate_ms``: the
    kernel's published median; ``reference_ms``: the reference's (for the score; None on
    /evaluate); ``work``: the reference's work as the judge counted it (``KernelTimed.work``);
    ``io_bytes``: the problem's input and output bytes, used where ``work`` is None;
    ``hints``: the request's ``problem_size``, which overrides what was counted; ``ncu``: the
    kernel's device metrics where ncu ran; ``peaks``: figures to use instead of the table's
    (measured ones, say); ``sm_clock_mhz``: the SM clock the kernel ran at and the GPU's
    highest, which scale the FLOP rates (a datasheet's are at the highest clock; a GPU held
    under its power limit runs slower, and its limit then is the rate at that clock, as
    ncu's percentages of peak are).
    """
    block = SpeedOfLight(device=device_name, candidate_ms=candidate_ms,
                         reference_ms=reference_ms,
                         count_ms=work.count_ms if work is not None else None)
    _problem(block, io_bytes, work, hints)
    peaks = peaks or peaks_for(device_name)
    if peaks is not None and sm_clock_mhz is not None:
        running, highest = sm_clock_mhz
        if 0 < running < highest:
            scale = running / highest
            peaks = DevicePeaks(f"{peaks.row} at {running:.0f} of {highest:.0f} MHz",
                                peaks.dram_bytes_per_s,
                                {d: f * scale for d, f in peaks.flops_per_s.items()},
                                peaks.source)
            block.notes.append(f"FLOP rates scaled to the SM clock it ran at ({running:.0f} "
                               f"of {highest:.0f} MHz)")
    if peaks is None:
        block.notes.append(f"no peak figures known for {device_name or 'this device'}")
    else:
        _bound(block, peaks)
    if block.bound_ms is not None and candidate_ms > 0:
        if block.memory_bound_ms is not None:
            block.memory_fraction = block.memory_bound_ms / candidate_ms
        if block.compute_bound_ms is not None:
            block.compute_fraction = block.compute_bound_ms / candidate_ms
        if block.bound_ms > candidate_ms:
            block.notes.append(
                "the kernel ran faster than the estimated bound: the bound misses work or "
                "traffic (uncounted FLOPs, data that stayed in cache between calls)")
        if reference_ms is not None and reference_ms > 0:
            block.score = sol_score(candidate_ms, reference_ms, block.bound_ms)
    return exact(block, ncu)


def exact(block: SpeedOfLight, ncu: DeviceMetricsResult | None) -> SpeedOfLight:
    """``block`` with Nsight Compute's measured fractions in place of the roofline's, where
    ``ncu`` has them (the roofline's kept beside; the bound and the score stay the
    roofline's)."""
    measured = ncu_fractions(ncu, block.dtype)
    if measured is not None:
        block.speed_of_light, block.fractions_source = "exact", "ncu"
        block.roofline_memory_fraction = block.memory_fraction
        block.roofline_compute_fraction = block.compute_fraction
        block.memory_fraction = measured.memory_fraction
        block.compute_fraction = measured.compute_fraction
        block.ncu_metrics = measured.metrics
    return block


def _problem(block: SpeedOfLight, io_bytes: int | None, work: ProblemWork | None,
             hints: ProblemSize | None) -> None:
    """The problem's bytes, FLOPs and dtype, each from the hint where given, else counted."""
    if hints is not None and hints.bytes is not None:
        block.bytes, block.bytes_source = hints.bytes, "hint"
    elif work is not None and work.moved_bytes > 0:
        block.bytes, block.bytes_source = work.moved_bytes, "io"
    elif io_bytes:
        block.bytes, block.bytes_source = io_bytes, "io"
    if hints is not None and hints.dtype is not None:
        block.dtype, block.dtype_source = hints.dtype, "hint"
    elif work is not None and work.dtype is not None:
        block.dtype, block.dtype_source = work.dtype, work.dtype_source
    if hints is not None and hints.flops is not None:
        block.flops, block.flops_source = hints.flops, "hint"
        block.flops_by_dtype = {block.dtype or "fp32": hints.flops} if hints.flops else {}
        if block.dtype is None and hints.flops:
            block.notes.append("no dtype known for the hinted FLOPs: fp32's peak is used")
    elif work is not None and work.flops is not None:
        block.flops, block.flops_source = work.flops, "counted"
        block.flops_by_dtype = dict(work.flops_by_dtype)
        if work.flops and not block.flops_by_dtype:
            block.flops_by_dtype = {block.dtype or "fp32": work.flops}
        if work.flops == 0:
            block.notes.append(_ELEMENTWISE_NOTE)
    else:
        reason = work.reason if work is not None and work.reason else "not counted"
        block.notes.append(f"FLOPs unknown ({reason}): the bound is the memory bound alone")


def _bound(block: SpeedOfLight, peaks: DevicePeaks) -> None:
    used = {d: peaks.flops_per_s[d] / 1e12 for d in block.flops_by_dtype
            if d in peaks.flops_per_s}
    block.peaks = PeaksUsed(row=peaks.row, source=peaks.source,
                            dram_gb_s=peaks.dram_bytes_per_s / 1e9, tflops=used)
    if block.bytes is not None:
        block.memory_bound_ms = memory_bound_s(block.bytes, peaks) * 1e3
    if block.flops is not None:
        seconds = compute_bound_s(block.flops_by_dtype, peaks)
        if seconds is None:
            missing = sorted(set(block.flops_by_dtype) - set(peaks.flops_per_s))
            block.notes.append(f"no {', '.join(missing)} peak known for {peaks.row}: the "
                               "compute bound is unknown")
        else:
            block.compute_bound_ms = seconds * 1e3
    bounds = {kind: ms for kind, ms in (("memory", block.memory_bound_ms),
                                        ("compute", block.compute_bound_ms)) if ms is not None}
    if bounds:
        kind = max(bounds, key=bounds.__getitem__)
        block.bound, block.bound_ms = kind, bounds[kind]  # type: ignore[assignment]
