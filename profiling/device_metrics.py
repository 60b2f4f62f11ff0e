"""Nsight Compute metrics in the API guide's categories, and the result a job returns.

:func:`categorize` turns one kernel's raw ncu metrics (see :mod:`profiling.ncu_parse`) into
the categories of the API guide (§5 and §7.4): ``speed_of_light``, ``detailed_metrics``,
``memory_metrics``, ``compute_metrics``, ``pipeline_metrics``, ``occupancy_metrics``,
``stall_metrics``, ``scheduler_metrics``, ``access_pattern_metrics``, ``roofline_metrics``
and ``timing_metrics``. A key is present only when ncu reported what it is computed from;
nothing is ever filled with 0. Which keys appear depends on the sections collected (the
``basic`` preset fills speed_of_light, occupancy and timing; ``full`` fills them all).

Units: percentages end in ``_pct``; bandwidths are GB/s (10^9 bytes per second); durations
in ``timing_metrics`` are milliseconds (``gpu_time_duration_unit`` says so) with seconds
beside them; frequencies are Hz; counts are plain numbers.

Several kernels in the job's range (a torch model launches more than one) give one entry
per kernel in ``kernels`` and, at the top level, the categories of their aggregate:
extensive quantities (durations, bytes, FLOPs, sectors, cycles) are summed, intensive ones
(percentages, rates, per-cycle and per-request ratios) are averaged weighted by each
kernel's duration, and launch parameters (``launch__*``: block size, registers, limits)
appear only when every kernel has the same value. Derived keys (arithmetic intensity,
GFLOP/s, excess fraction) are recomputed from the aggregate.

Differences from the guide's example, on purpose:

* the result carries ``available``, ``reason``, ``preset``, ``sections``, ``clocks_locked``,
  ``ncu_time_s``, ``reader`` and ``kernels`` beside the categories;
* ``memory_metrics.dram_total_bandwidth_gb_s`` is the DRAM's peak bandwidth as ncu reports
  it, ``dram_avg_bandwidth_gb_s`` (= §7.4's ``dram_throughput_gbps``) the achieved one;
* ``detailed_metrics.warp_occupancy_pct`` is the theoretical occupancy and
  ``achieved_occupancy_pct`` the achieved one (both keys of §7.4);
* ``stall_metrics`` has ``stall_<reason>_pct`` for every reason ncu reported: that reason's
  share of all stall cycles per issued instruction, so the reported shares add up to 100;
* ``roofline_metrics.flop_count_total`` counts FP64, FP32 and FP16 add, mul and fma
  (fma = 2 FLOPs) on the FMA pipes, as ncu's roofline chart does; tensor-core work is not
  in it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel, Field

from profiling.ncu_parse import KernelRecord, MetricValue

CategoryValues = dict[str, float | int | str]
Metrics = dict[str, MetricValue]

CATEGORIES = (
    "speed_of_light", "detailed_metrics", "memory_metrics", "compute_metrics",
    "pipeline_metrics", "occupancy_metrics", "stall_metrics", "scheduler_metrics",
    "access_pattern_metrics", "roofline_metrics", "timing_metrics",
)
DURATION = "gpu__time_duration.sum"
GB = 1e9
_PCT_ACTIVE = ".avg.pct_of_peak_sustained_active"
_PCT_ELAPSED = ".avg.pct_of_peak_sustained_elapsed"

# (output key, ncu metric names tried in order, factor applied to the base-unit value)
Direct = tuple[str, tuple[str, ...], float]

_DIRECT: dict[str, list[Direct]] = {
    "speed_of_light": [
        ("compute_throughput_pct", ("sm__throughput" + _PCT_ELAPSED,), 1),
        ("memory_throughput_pct", ("gpu__compute_memory_throughput" + _PCT_ELAPSED,), 1),
        ("compute_memory_throughput_pct",
         ("gpu__compute_memory_access_throughput" + _PCT_ELAPSED,), 1),
        ("sm_throughput_pct", ("sm__instruction_throughput" + _PCT_ACTIVE,), 1),
        ("dram_throughput_pct", ("dram__throughput" + _PCT_ELAPSED,), 1),
        ("gpu_dram_throughput_pct", ("gpu__dram_throughput" + _PCT_ELAPSED,), 1),
        ("l1tex_throughput_pct", ("l1tex__throughput" + _PCT_ACTIVE,), 1),
        ("l2_throughput_pct", ("lts__throughput" + _PCT_ELAPSED,), 1),
    ],
    "detailed_metrics": [
        ("l1_hit_rate_pct", ("l1tex__t_sector_hit_rate.pct",), 1),
        ("l2_hit_rate_pct", ("lts__t_sector_hit_rate.pct",), 1),
        ("warp_occupancy_pct", ("sm__maximum_warps_per_active_cycle_pct",), 1),
        ("achieved_occupancy_pct", ("sm__warps_active" + _PCT_ACTIVE,), 1),
        ("instructions_per_cycle", ("sm__inst_executed.avg.per_cycle_active",), 1),
        ("waves_per_sm", ("launch__waves_per_multiprocessor",), 1),
    ],
    "memory_metrics": [
        ("dram_avg_bandwidth_gb_s", ("dram__bytes.sum.per_second",), 1 / GB),
        ("dram_throughput_gbps", ("dram__bytes.sum.per_second",), 1 / GB),
        ("dram_read_bandwidth_gb_s", ("dram__bytes_read.sum.per_second",), 1 / GB),
        ("dram_write_bandwidth_gb_s", ("dram__bytes_write.sum.per_second",), 1 / GB),
        ("l2_throughput_gbps", ("lts__t_bytes.sum.per_second",), 1 / GB),
        ("dram_active_cycles_pct", ("dram__cycles_active" + _PCT_ELAPSED,), 1),
        ("l1_writeback_active_pct", ("l1tex__lsu_writeback_active" + _PCT_ACTIVE,), 1),
        ("l1_read_sectors_pct", ("l1tex__m_xbar2l1tex_read_sectors" + _PCT_ELAPSED,), 1),
        ("l2_throughput_pct", ("lts__throughput" + _PCT_ELAPSED,), 1),
        ("dram_bytes_read", ("dram__bytes_read.sum",), 1),
        ("dram_bytes_write", ("dram__bytes_write.sum",), 1),
    ],
    "compute_metrics": [
        ("fma_pipe_utilization_pct", ("sm__inst_executed_pipe_fma" + _PCT_ACTIVE,), 1),
        ("fp64_pipe_utilization_pct", ("sm__inst_executed_pipe_fp64" + _PCT_ACTIVE,), 1),
        ("alu_pipe_utilization_pct", ("sm__inst_executed_pipe_alu" + _PCT_ACTIVE,), 1),
        ("xu_pipe_utilization_pct", ("sm__inst_executed_pipe_xu" + _PCT_ACTIVE,), 1),
        ("tensor_pipe_utilization_pct", (
            "sm__inst_executed_pipe_tensor" + _PCT_ACTIVE,
            "sm__inst_executed_pipe_tensor_op_gmma" + _PCT_ACTIVE,
            "sm__inst_executed_pipe_tensor_op_hmma" + _PCT_ACTIVE,
        ), 1),
        ("instructions_per_cycle", ("sm__inst_executed.avg.per_cycle_active",), 1),
        ("occupancy_limit_blocks", ("launch__occupancy_limit_blocks",), 1),
        ("occupancy_limit_registers", ("launch__occupancy_limit_registers",), 1),
        ("occupancy_limit_shared_mem", ("launch__occupancy_limit_shared_mem",), 1),
        ("occupancy_limit_warps", ("launch__occupancy_limit_warps",), 1),
        ("registers_per_thread", ("launch__registers_per_thread",), 1),
    ],
    "pipeline_metrics": [
        ("fma_pipe_active_pct", ("sm__pipe_fma_cycles_active" + _PCT_ACTIVE,), 1),
        ("alu_pipe_active_pct", ("sm__pipe_alu_cycles_active" + _PCT_ACTIVE,), 1),
        ("tensor_pipe_active_pct", (
            "sm__pipe_tensor_cycles_active" + _PCT_ACTIVE,
            "sm__pipe_tensor_op_gmma_cycles_active" + _PCT_ACTIVE,
            "sm__pipe_tensor_op_hmma_cycles_active" + _PCT_ACTIVE,
        ), 1),
        ("shared_pipe_active_pct", ("sm__pipe_shared_cycles_active" + _PCT_ACTIVE,), 1),
        ("fp64_pipe_active_pct", ("sm__pipe_fp64_cycles_active" + _PCT_ACTIVE,), 1),
        ("sm_issue_active_pct", ("sm__inst_issued" + _PCT_ACTIVE,), 1),
    ],
    "occupancy_metrics": [
        ("occupancy_limit_registers", ("launch__occupancy_limit_registers",), 1),
        ("occupancy_limit_shared_mem", ("launch__occupancy_limit_shared_mem",), 1),
        ("occupancy_limit_warps", ("launch__occupancy_limit_warps",), 1),
        ("occupancy_limit_blocks", ("launch__occupancy_limit_blocks",), 1),
        ("waves_per_sm", ("launch__waves_per_multiprocessor",), 1),
        ("block_size", ("launch__block_size",), 1),
        ("grid_size", ("launch__grid_size",), 1),
        ("registers_per_thread", ("launch__registers_per_thread",), 1),
        ("theoretical_occupancy_pct", ("sm__maximum_warps_per_active_cycle_pct",), 1),
        ("achieved_occupancy_pct", ("sm__warps_active" + _PCT_ACTIVE,), 1),
        ("achieved_active_warps_per_sm", ("sm__warps_active.avg.per_cycle_active",), 1),
    ],
    "scheduler_metrics": [
        ("warps_eligible_per_cycle", ("smsp__warps_eligible.avg.per_cycle_active",), 1),
        ("warps_active_per_cycle", ("smsp__warps_active.avg.per_cycle_active",), 1),
        ("inst_issued_per_cycle", ("smsp__inst_issued.avg.per_cycle_active",), 1),
        ("issue_active_pct", ("smsp__issue_active" + _PCT_ACTIVE,), 1),
        ("no_eligible_pct", ("smsp__issue_inst0" + _PCT_ACTIVE,), 1),
    ],
    "access_pattern_metrics": [
        ("l2_theoretical_sectors_global", ("memory_l2_theoretical_sectors_global",), 1),
        ("l2_theoretical_sectors_global_ideal",
         ("memory_l2_theoretical_sectors_global_ideal",), 1),
        ("l2_theoretical_sectors_global_excessive",
         ("derived__memory_l2_theoretical_sectors_global_excessive",), 1),
        ("shared_bank_conflicts_load_sum",
         ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",), 1),
        ("shared_bank_conflicts_store_sum",
         ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",), 1),
    ],
    "roofline_metrics": [],
    "timing_metrics": [
        ("gpu_time_duration_sum", (DURATION,), 1e3),
        ("gpu_time_duration_seconds", (DURATION,), 1),
        ("gpc_cycles_elapsed_max", ("gpc__cycles_elapsed.max",), 1),
        ("sm_frequency_hz", ("gpc__cycles_elapsed.avg.per_second",), 1),
        ("dram_frequency_hz", ("dram__cycles_elapsed.avg.per_second",), 1),
    ],
    "stall_metrics": [
        ("warp_cycles_per_issued_instruction",
         ("smsp__average_warp_latency_per_inst_issued.ratio",), 1),
    ],
}

# FP64/FP32/FP16 add, mul and fma instructions: (precision, operation, FLOPs per instruction)
_FLOP_OPS = [(p, op, 2 if op == "fma" else 1) for p in "dfh" for op in ("add", "mul", "fma")]
# Extra metrics the ``full`` preset asks ncu for, beyond its sections: the inputs of the
# roofline and access-pattern keys that no section collects as totals.
FULL_EXTRA_METRICS = (
    DURATION, "dram__bytes.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
    *(f"sm__sass_thread_inst_executed_op_{p}{op}_pred_on.sum" for p, op, _ in _FLOP_OPS),
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
)
_STALL_RATIO = re.compile(r"^smsp__average_warps?_issue_stalled_(\w+?)_per_issue_active\.ratio$")
_STALL_SAMPLES = re.compile(r"^smsp__pcsamp_warps_issue_stalled_(\w+?)$")
_INTENSIVE = ("pct", ".ratio", "per_cycle", "per_second", "per_request", "hit_rate",
              "peak_sustained", "per_multiprocessor")


class CategoryMetrics(BaseModel):
    """The API guide's device-metric categories; a key ncu did not report is absent."""

    speed_of_light: CategoryValues = Field(default_factory=dict)
    detailed_metrics: CategoryValues = Field(default_factory=dict)
    memory_metrics: CategoryValues = Field(default_factory=dict)
    compute_metrics: CategoryValues = Field(default_factory=dict)
    pipeline_metrics: CategoryValues = Field(default_factory=dict)
    occupancy_metrics: CategoryValues = Field(default_factory=dict)
    stall_metrics: CategoryValues = Field(default_factory=dict)
    scheduler_metrics: CategoryValues = Field(default_factory=dict)
    access_pattern_metrics: CategoryValues = Field(default_factory=dict)
    roofline_metrics: CategoryValues = Field(default_factory=dict)
    timing_metrics: CategoryValues = Field(default_factory=dict)


class KernelDeviceMetrics(CategoryMetrics):
    """One profiled kernel launch inside the job's NVTX range."""

    id: int
    name: str
    block_size: str | None = None  # "(x, y, z)" as ncu prints it
    grid_size: str | None = None


class DeviceMetricsResult(CategoryMetrics):
    """Nsight Compute metrics of one kernel role of a job, or why there are none.

    The categories at the top level are those of the aggregate of ``kernels`` (the same
    values when the range held one kernel).
    """

    available: bool
    reason: str | None = None  # why not available, in words an operator can act on
    preset: str = "basic"
    sections: list[str] = Field(default_factory=list)
    clocks_locked: bool = False
    ncu_time_s: float | None = None  # wall time of the ncu profiling run
    reader: str | None = None  # "ncu_report" or "csv": how the report was read
    kernels: list[KernelDeviceMetrics] = Field(default_factory=list)

    @classmethod
    def unavailable(cls, reason: str, **fields: Any) -> DeviceMetricsResult:
        return cls(available=False, reason=reason, **fields)


# ---- from raw metrics to categories ---------------------------------------------------------


def categorize(metrics: Metrics) -> dict[str, CategoryValues]:
    """The guide's categories for one set of raw ncu metrics (base units)."""
    out: dict[str, CategoryValues] = {name: {} for name in CATEGORIES}
    for category, entries in _DIRECT.items():
        for key, names, factor in entries:
            value = _first(metrics, names)
            if value is not None:
                out[category][key] = _scaled(value, factor)
    if "gpu_time_duration_sum" in out["timing_metrics"]:
        out["timing_metrics"]["gpu_time_duration_unit"] = "ms"
    for derive in _DERIVED:
        derive(metrics, out)
    return {name: {k: _tidy(v) for k, v in values.items()} for name, values in out.items()}


def _first(metrics: Metrics, names: Iterable[str]) -> float | int | None:
    for name in names:
        value = metrics.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
    return None


def _scaled(value: float, factor: float) -> float:
    return value if factor == 1 else value * factor


def _tidy(value: float | str) -> float | str:
    """Whole numbers as ints; else nine significant digits (no float noise like 0.0129000001)."""
    if not isinstance(value, float):
        return value
    if value.is_integer() and abs(value) < 2**53:
        return int(value)
    return float(f"{value:.9g}")


def _num(metrics: Metrics, name: str) -> float | None:
    value = metrics.get(name)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _sm_active_cycles(metrics: Metrics, out: dict[str, CategoryValues]) -> None:
    active = _num(metrics, "sm__cycles_active.avg")
    elapsed = _num(metrics, "sm__cycles_elapsed.avg") or _num(metrics, "gpc__cycles_elapsed.max")
    if active is not None and elapsed:
        out["detailed_metrics"]["sm_active_cycles_pct"] = 100.0 * active / elapsed


def _dram_peak(metrics: Metrics, out: dict[str, CategoryValues]) -> None:
    per_cycle = _num(metrics, "dram__bytes.sum.peak_sustained")
    frequency = _num(metrics, "dram__cycles_elapsed.avg.per_second")
    if per_cycle is not None and frequency is not None:
        out["memory_metrics"]["dram_total_bandwidth_gb_s"] = per_cycle * frequency / GB


def _shared_mem(metrics: Metrics, out: dict[str, CategoryValues]) -> None:
    static = _num(metrics, "launch__shared_mem_per_block_static")
    dynamic = _num(metrics, "launch__shared_mem_per_block_dynamic")
    if static is not None and dynamic is not None:
        out["occupancy_metrics"]["shared_mem_per_block"] = int(static + dynamic)


def _stalls(metrics: Metrics, out: dict[str, CategoryValues]) -> None:
    for pattern in (_STALL_RATIO, _STALL_SAMPLES):
        reasons: dict[str, float] = {}
        for name, value in metrics.items():
            match = pattern.match(name)
            if match is None or not isinstance(value, (int, float)):
                continue
            if not match.group(1).endswith("not_issued"):  # a breakdown, not a reason
                reasons[match.group(1)] = float(value)
        total = sum(reasons.values())
        if reasons and total > 0:
            for reason, value in sorted(reasons.items()):
                out["stall_metrics"][f"stall_{reason}_pct"] = 100.0 * value / total
            return


def _access_patterns(metrics: Metrics, out: dict[str, CategoryValues]) -> None:
    target = out["access_pattern_metrics"]
    for op, key in (("ld", "l1_load_sectors_per_req"), ("st", "l1_store_sectors_per_req")):
        ratio = _num(
            metrics, f"l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_{op}.ratio"
        )
        sectors = _num(metrics, f"l1tex__t_sectors_pipe_lsu_mem_global_op_{op}.sum")
        requests = _num(metrics, f"l1tex__t_requests_pipe_lsu_mem_global_op_{op}.sum")
        if ratio is not None:
            target[key] = ratio
        elif sectors is not None and requests:
            target[key] = sectors / requests
    total = target.get("l2_theoretical_sectors_global")
    excessive = target.get("l2_theoretical_sectors_global_excessive")
    if isinstance(total, (int, float)) and isinstance(excessive, (int, float)) and total > 0:
        target["l2_excess_frac"] = excessive / total


def _roofline(metrics: Metrics, out: dict[str, CategoryValues]) -> None:
    duration = _num(metrics, DURATION)
    flops = _flops(metrics, duration)
    dram_bytes = _num(metrics, "dram__bytes.sum")
    if dram_bytes is None:
        read, write = _num(metrics, "dram__bytes_read.sum"), _num(metrics, "dram__bytes_write.sum")
        if read is not None and write is not None:
            dram_bytes = read + write
    if dram_bytes is None:
        rate = _num(metrics, "dram__bytes.sum.per_second")
        if rate is not None and duration is not None:
            dram_bytes = rate * duration
    target = out["roofline_metrics"]
    if flops is not None:
        target["flop_count_total"] = flops
    if dram_bytes is not None:
        target["dram_bytes_sum"] = dram_bytes
    if flops is not None and dram_bytes:
        target["arithmetic_intensity"] = flops / dram_bytes
    if flops is not None and duration:
        target["gflops"] = flops / duration / GB


def _flops(metrics: Metrics, duration: float | None) -> float | None:
    """FLOPs from instruction totals, else from the roofline section's per-cycle rates."""
    prefix = "sm__sass_thread_inst_executed_op_"
    totals = [(_num(metrics, f"{prefix}{p}{op}_pred_on.sum"), weight)
              for p, op, weight in _FLOP_OPS]
    if any(count is not None for count, _ in totals):
        return float(sum(count * weight for count, weight in totals if count is not None))
    rates = [(_num(metrics, f"{prefix}{p}{op}_pred_on.sum.per_cycle_elapsed"), weight)
             for p, op, weight in _FLOP_OPS]
    frequency = _num(metrics, "smsp__cycles_elapsed.avg.per_second")
    if frequency is None or duration is None or all(rate is None for rate, _ in rates):
        return None
    per_cycle = sum(rate * weight for rate, weight in rates if rate is not None)
    return per_cycle * frequency * duration


_DERIVED: list[Callable[[Metrics, dict[str, CategoryValues]], None]] = [
    _sm_active_cycles, _dram_peak, _shared_mem, _stalls, _access_patterns, _roofline,
]


# ---- several kernels -------------------------------------------------------------------------


def aggregate(records: list[KernelRecord]) -> Metrics:
    """One set of raw metrics standing for all ``records`` (see the module docstring)."""
    if len(records) == 1:
        return dict(records[0].metrics)
    names = {name for r in records for name in r.metrics}
    durations = [r.number(DURATION) for r in records]
    weights = [d if d is not None and d > 0 else 0.0 for d in durations]
    if not all(weights):  # without every kernel's duration, a plain mean
        weights = [1.0] * len(records)
    out: Metrics = {}
    for name in sorted(names):
        values = [r.metrics.get(name) for r in records]
        numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if name.startswith(("launch__", "device__")) or len(numbers) != len(values):
            if all(v == values[0] for v in values) and values[0] is not None:
                out[name] = values[0]
        elif any(marker in name for marker in _INTENSIVE):
            out[name] = sum(float(v) * w for v, w in zip(numbers, weights)) / sum(weights)
        else:
            out[name] = sum(numbers)
    return out


def result_from_records(records: list[KernelRecord], **fields: Any) -> DeviceMetricsResult:
    """The job's result for the kernels ncu profiled in its range (``fields``: preset, ...)."""
    kernels = [
        KernelDeviceMetrics.model_validate({
            "id": r.id, "name": r.name, "block_size": r.block_size, "grid_size": r.grid_size,
            **categorize(r.metrics),
        })
        for r in records
    ]
    return DeviceMetricsResult.model_validate(
        {"available": True, "kernels": kernels, **categorize(aggregate(records)), **fields}
    )


def device_metrics_layout(
    original: DeviceMetricsResult, custom: DeviceMetricsResult | None = None
) -> dict[str, Any]:
    """``metadata["device_metrics"]`` in the API guide's layout (§5).

    /evaluate: ``device_metrics_layout(kernel)`` → ``{"original_device_metrics": ...}``.
    /compare: the custom kernel's result gets ``device_metrics_layout(ref, custom)`` →
    ``{"original_device_metrics": <reference>, "custom_device_metrics": <custom>}``, and the
    reference's result ``device_metrics_layout(ref)``.
    """
    layout = {"original_device_metrics": original.model_dump(mode="json")}
    if custom is not None:
        layout["custom_device_metrics"] = custom.model_dump(mode="json")
    return layout
