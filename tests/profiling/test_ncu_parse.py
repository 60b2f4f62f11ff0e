"""Reading ncu reports into the API guide's categories: saved reports, and small inline CSVs.

The saved reports live in ``tests/profiling/fixtures/``: ``*.csv`` files are ncu's raw page
(``ncu --import R --csv --page raw --print-units base``), ``*.ncu-rep`` files the reports
themselves (read only where NVIDIA's ``ncu_report`` module is importable). Real ones come from
``scripts/capture_ncu_fixture.sh`` on a GPU host; ``ncu_raw_handmade.csv`` is a stand-in
written by hand from ncu's documented format until a real capture replaces it.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from profiling.device_metrics import (
    _DIRECT,
    CATEGORIES,
    DeviceMetricsResult,
    aggregate,
    categorize,
    device_metrics_layout,
    result_from_records,
)
from profiling.ncu_parse import (
    KernelRecord,
    ReportFormatError,
    parse_value,
    records_from_csv,
    records_from_json,
    records_from_report,
    records_to_json,
    unit_factor,
)

FIXTURES = Path(__file__).parent / "fixtures"
CSV_FIXTURES = sorted(FIXTURES.glob("*.csv"))
REP_FIXTURES = sorted(FIXTURES.glob("*.ncu-rep"))
HAVE_NCU_REPORT = importlib.util.find_spec("ncu_report") is not None


def load(path: Path) -> list[KernelRecord]:
    if path.suffix == ".csv":
        return records_from_csv(path.read_text())
    if not HAVE_NCU_REPORT:
        pytest.skip("NVIDIA's ncu_report module is not importable here (pip install ncu-report)")
    return records_from_report(path)


ALL_FIXTURES = [pytest.param(p, id=p.name) for p in CSV_FIXTURES + REP_FIXTURES]


def test_there_is_a_csv_fixture() -> None:
    assert CSV_FIXTURES, f"no ncu CSV under {FIXTURES}"


# ---- every saved report -----------------------------------------------------------------------


@pytest.mark.parametrize("path", ALL_FIXTURES)
def test_each_kernel_has_a_name_and_a_duration(path: Path) -> None:
    records = load(path)
    assert records
    for record in records:
        assert record.name and record.name != "?"
        duration = record.number("gpu__time_duration.sum")
        assert duration is not None and 0 < duration < 10, duration  # seconds: base units


@pytest.mark.parametrize("path", ALL_FIXTURES)
def test_result_has_every_category_and_the_speed_of_light(path: Path) -> None:
    records = load(path)
    result = result_from_records(records, preset="basic")
    assert result.available and len(result.kernels) == len(records)
    for category in CATEGORIES:
        assert isinstance(getattr(result, category), dict)
    sol = result.speed_of_light
    assert 0 <= sol["compute_throughput_pct"] <= 100.5
    assert 0 <= sol["memory_throughput_pct"] <= 100.5
    timing = result.timing_metrics
    assert timing["gpu_time_duration_unit"] == "ms"
    assert math.isclose(timing["gpu_time_duration_sum"], timing["gpu_time_duration_seconds"] * 1e3,
                        rel_tol=1e-5)
    total = sum(r.number("gpu__time_duration.sum") or 0 for r in records)
    assert math.isclose(timing["gpu_time_duration_seconds"], total, rel_tol=1e-5)


@pytest.mark.parametrize("path", ALL_FIXTURES)
def test_a_key_is_present_exactly_when_ncu_reported_its_metric(path: Path) -> None:
    """Absent, never a made-up zero: each direct key maps to a metric in the report."""
    for record in load(path):
        categories = categorize(record.metrics)
        for category, entries in _DIRECT.items():
            for key, names, _ in entries:
                reported = any(isinstance(record.metrics.get(n), (int, float)) for n in names)
                assert (key in categories[category]) == reported, (record.name, category, key)


@pytest.mark.parametrize("path", ALL_FIXTURES)
def test_layout_is_the_guides(path: Path) -> None:
    result = result_from_records(load(path), preset="basic")
    layout = device_metrics_layout(result)
    assert list(layout) == ["original_device_metrics"]
    body = layout["original_device_metrics"]
    assert body["available"] is True and set(CATEGORIES) <= set(body)
    both = device_metrics_layout(result, result)
    assert set(both) == {"original_device_metrics", "custom_device_metrics"}
    assert DeviceMetricsResult.model_validate(body) == result


@pytest.mark.parametrize("path", ALL_FIXTURES)
def test_records_survive_the_reader_processs_json(path: Path) -> None:
    records = load(path)
    assert records_from_json(records_to_json(records)) == records


@pytest.mark.parametrize("path", [pytest.param(p, id=p.name) for p in REP_FIXTURES])
def test_both_readers_agree_on_a_report_and_its_csv(path: Path) -> None:
    csv_path = path.with_suffix(".csv")
    if not csv_path.exists():
        pytest.skip(f"no {csv_path.name} captured beside the report")
    from_rep, from_csv = load(path), load(csv_path)
    assert [r.name for r in from_rep] == [r.name for r in from_csv]
    for a, b in zip(from_rep, from_csv):
        for name in ("gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed"):
            assert math.isclose(a.number(name) or 0, b.number(name) or 0, rel_tol=1e-3), name


# ---- the hand-made stand-in: exact values -------------------------------------------------------


def test_handmade_fixture_values() -> None:
    path = FIXTURES / "ncu_raw_handmade.csv"
    if not path.exists():
        pytest.skip("the hand-made stand-in was replaced by a real capture")
    records = records_from_csv(path.read_text())
    assert [r.id for r in records] == [0, 1]
    assert records[0].name.startswith("void at::native::vectorized_elementwise_kernel<4, ")
    assert records[0].block_size == "(128, 1, 1)" and records[1].grid_size == "(4096, 1, 1)"
    assert records[1].metrics["launch__grid_size"] == 4096  # "4,096": thousands separator
    assert records[0].metrics["device__attribute_display_name"] == "NVIDIA H100 80GB HBM3"
    tensor = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
    assert tensor not in records[0].metrics  # ncu printed n/a

    add = result_from_records(records[1:])
    assert add.timing_metrics["gpu_time_duration_sum"] == pytest.approx(6.704e-3)
    assert add.roofline_metrics["flop_count_total"] == 1_048_576
    assert add.roofline_metrics["dram_bytes_sum"] == 12_615_680
    assert add.roofline_metrics["gflops"] == pytest.approx(1_048_576 / 6.704e-6 / 1e9, rel=1e-5)
    assert add.access_pattern_metrics["l2_excess_frac"] == pytest.approx(4096 / 397_312, rel=1e-5)
    assert add.access_pattern_metrics["l1_store_sectors_per_req"] == 32
    assert add.occupancy_metrics["block_size"] == 256
    assert "tensor_pipe_active_pct" not in add.pipeline_metrics  # ncu said n/a
    assert add.memory_metrics["dram_avg_bandwidth_gb_s"] == pytest.approx(1881.84)
    peak = add.memory_metrics["dram_total_bandwidth_gb_s"]
    assert peak == pytest.approx(1280 * 2.61938, rel=1e-5)
    shares = [v for k, v in add.stall_metrics.items() if k.startswith("stall_")]
    assert sum(shares) == pytest.approx(100)


# ---- units and the CSV format --------------------------------------------------------------------


@pytest.mark.parametrize(("unit", "factor"), [
    ("", 1), ("%", 1), ("nsecond", 1e-9), ("usecond", 1e-6), ("msecond", 1e-3), ("second", 1),
    ("Kbyte", 1e3), ("Mbyte", 1e6), ("Gbyte/second", 1e9), ("byte/usecond", 1e6),
    ("cycle/nsecond", 1e9), ("Ghz", 1e9), ("inst/cycle", 1), ("sector/request", 1),
    ("register/thread", 1), ("Kbyte/block", 1e3),
])
def test_unit_factor(unit: str, factor: float) -> None:
    assert unit_factor(unit) == pytest.approx(factor)


def test_parse_value() -> None:
    assert parse_value("1,234", "") == 1234 and isinstance(parse_value("1,234"), int)
    assert parse_value("12.5", "usecond") == pytest.approx(12.5e-6)
    assert parse_value("n/a") is None and parse_value("") is None and parse_value(" ") is None
    assert parse_value("0", "%") == 0  # a measured zero stays a zero
    assert parse_value("CachePreferNone") == "CachePreferNone"


HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
          '"Block Size","Grid Size","Device","CC"')


def raw_csv(metric_names: list[str], units: list[str], rows: list[tuple[str, list[str]]]) -> str:
    lines = ["==PROF== Connected to process 1 (/usr/bin/python3)",
             HEADER + "," + ",".join(f'"{m}"' for m in metric_names),
             '"","","","","","","","","","",""' + "," + ",".join(f'"{u}"' for u in units)]
    for i, (name, values) in enumerate(rows):
        lines.append(f'"{i}","1","python3","h","{name}","1","7","(256, 1, 1)","(8, 1, 1)","0","9.0",'
                     + ",".join(f'"{v}"' for v in values))
    lines.append("==PROF== Disconnected from process 1")
    return "\n".join(lines) + "\n"


def test_raw_csv_with_prefixed_units_and_prof_lines() -> None:
    names = ["gpu__time_duration.sum", "dram__bytes.sum",
             "sm__throughput.avg.pct_of_peak_sustained_elapsed"]
    text = raw_csv(names, ["usecond", "Kbyte", "%"], [("k(int, float*)", ["3.50", "1,024", "n/a"])])
    [record] = records_from_csv(text)
    assert record.name == "k(int, float*)"
    assert record.number("gpu__time_duration.sum") == pytest.approx(3.5e-6)
    assert record.number("dram__bytes.sum") == pytest.approx(1.024e6)
    assert "sm__throughput.avg.pct_of_peak_sustained_elapsed" not in record.metrics
    assert "compute_throughput_pct" not in categorize(record.metrics)["speed_of_light"]


def test_long_form_csv() -> None:
    header = (HEADER + ',"Section Name","Metric Name","Metric Unit","Metric Value"')
    k = '"0","1","p","h","k","1","7","(32, 1, 1)","(1, 1, 1)","0","9.0","GPU Speed Of Light Throughput"'
    j = '"1","1","p","h","j","1","7","(64, 1, 1)","(2, 1, 1)","0","9.0","Launch Statistics"'
    text = (f'{header}\n{k},"gpu__time_duration.sum","msecond","1.5"\n'
            f'{k},"sm__throughput.avg.pct_of_peak_sustained_elapsed","%","42"\n'
            f'{j},"launch__block_size","","64"\n')
    k, j = records_from_csv(text)
    assert (k.name, j.name) == ("k", "j")
    assert k.metrics == {"gpu__time_duration.sum": pytest.approx(1.5e-3),
                         "sm__throughput.avg.pct_of_peak_sustained_elapsed": 42}
    assert j.metrics == {"launch__block_size": 64} and j.block_size == "(64, 1, 1)"


def test_text_without_a_header_is_refused() -> None:
    with pytest.raises(ReportFormatError):
        records_from_csv("==PROF== Connected\n==WARNING== No kernels were profiled.\n")


def test_a_short_row_is_refused() -> None:
    text = raw_csv(["gpu__time_duration.sum"], ["nsecond"], [("k", ["5"])]).replace(',"5"', "")
    with pytest.raises(ReportFormatError):
        records_from_csv(text)


# ---- several kernels in the range ----------------------------------------------------------------


def test_aggregate_sums_extensive_and_weights_intensive_by_duration() -> None:
    a = KernelRecord(0, "a", metrics={
        "gpu__time_duration.sum": 1e-6, "dram__bytes.sum": 100,
        "sm__throughput.avg.pct_of_peak_sustained_elapsed": 10.0,
        "launch__block_size": 256, "launch__grid_size": 4, "device__attribute_display_name": "H100",
        "sm__sass_thread_inst_executed_op_ffma_pred_on.sum": 10,
    })
    b = KernelRecord(1, "b", metrics={
        "gpu__time_duration.sum": 3e-6, "dram__bytes.sum": 300,
        "sm__throughput.avg.pct_of_peak_sustained_elapsed": 50.0,
        "launch__block_size": 256, "launch__grid_size": 8, "device__attribute_display_name": "H100",
    })
    merged = aggregate([a, b])
    assert merged["gpu__time_duration.sum"] == pytest.approx(4e-6)
    assert merged["dram__bytes.sum"] == 400
    assert merged["sm__throughput.avg.pct_of_peak_sustained_elapsed"] == pytest.approx(40.0)
    assert merged["launch__block_size"] == 256 and "launch__grid_size" not in merged
    assert merged["device__attribute_display_name"] == "H100"
    # reported by one kernel only: no total can be claimed for both
    assert "sm__sass_thread_inst_executed_op_ffma_pred_on.sum" not in merged

    result = result_from_records([a, b])
    assert [k.name for k in result.kernels] == ["a", "b"]
    assert result.kernels[0].roofline_metrics["flop_count_total"] == 20
    assert "flop_count_total" not in result.roofline_metrics
    assert result.roofline_metrics["dram_bytes_sum"] == 400
    assert result.occupancy_metrics == {"block_size": 256}


def test_one_kernel_is_its_own_aggregate() -> None:
    only = KernelRecord(0, "k", metrics={"gpu__time_duration.sum": 2e-6,
                                         "sm__throughput.avg.pct_of_peak_sustained_elapsed": 12.5})
    result = result_from_records([only])
    assert result.speed_of_light == {"compute_throughput_pct": 12.5}
    assert result.kernels[0].speed_of_light == result.speed_of_light


def test_flops_from_the_roofline_sections_rates_when_totals_are_missing() -> None:
    metrics = {
        "gpu__time_duration.sum": 2e-6,
        "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed": 100.0,
        "sm__sass_thread_inst_executed_op_fadd_pred_on.sum.per_cycle_elapsed": 50.0,
        "smsp__cycles_elapsed.avg.per_second": 1.5e9,
        "dram__bytes.sum.per_second": 1e12,
    }
    roofline = categorize(metrics)["roofline_metrics"]
    assert roofline["flop_count_total"] == pytest.approx(250 * 1.5e9 * 2e-6)
    assert roofline["dram_bytes_sum"] == pytest.approx(2e6)
    assert roofline["arithmetic_intensity"] == pytest.approx(750_000 / 2e6)


def test_stall_shares_use_sampling_counts_when_ratios_are_missing() -> None:
    stalls = categorize({
        "smsp__pcsamp_warps_issue_stalled_long_scoreboard": 30,
        "smsp__pcsamp_warps_issue_stalled_wait": 10,
        "smsp__pcsamp_warps_issue_stalled_wait_not_issued": 5,
    })["stall_metrics"]
    assert stalls == {"stall_long_scoreboard_pct": 75.0, "stall_wait_pct": 25.0}


def test_nothing_reported_gives_empty_categories() -> None:
    assert all(values == {} for values in categorize({}).values())
