"""bench/sol_vs_ncu.py's reading of ncu and its comparison, on a real ncu capture (an H100's
torch relu, tests/profiling/fixtures): the parts that run without a GPU."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from profiling.ncu_parse import records_from_csv
from shared.observations import ProblemWork

ROOT = Path(__file__).resolve().parents[3]
RELU = ROOT / "tests" / "profiling" / "fixtures" / "ncu_torch_relu.csv"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sol_vs_ncu", ROOT / "bench" / "sol_vs_ncu.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclass looks its module up there)
    spec.loader.exec_module(module)
    return module


def test_ncus_figures_are_read_under_the_names_this_ncu_gave_them() -> None:
    bench = load()
    records = records_from_csv(RELU.read_text())
    figures = bench.ncu_figures(records, "fp32")
    # this capture's ncu says gpu__dram_throughput, not dram__throughput
    assert figures["dram_throughput_metric"].startswith("gpu__dram_throughput")
    assert figures["dram_throughput_pct"] == pytest.approx(24.34)
    assert figures["tensor_pipe_pct"] == 0
    assert figures["duration_ms"] == pytest.approx(5.216e-3)
    assert figures["dram_peak_gb_s"] == pytest.approx(1280 * 2586503067.48 / 1e9)  # an H100's
    block = figures["block_fractions"]
    assert block["memory_fraction"] == pytest.approx(0.2434)
    assert block["compute_fraction"] == pytest.approx(0.0913)  # sm__throughput: fp32 work


def test_the_comparison_puts_the_estimate_beside_ncu_with_their_ratio() -> None:
    bench = load()
    work = ProblemWork(flops=0, read_bytes=4 * 2**20, written_bytes=4 * 2**20, dtype="fp32",
                       dtype_source="inputs")
    estimate = bench.speed_of_light("NVIDIA H100 80GB HBM3", 0.01, work=work)
    row = {"case": "relu", "event_median_ms": 0.01, "work": work.model_dump(mode="json"),
           "estimate": estimate.model_dump(mode="json"),
           "ncu": bench.ncu_figures(records_from_csv(RELU.read_text()), "fp32")}
    bench.compare(row, "NVIDIA H100 80GB HBM3")
    memory = row["comparison"]["memory"]
    assert memory["ncu"] == pytest.approx(0.2434)
    assert memory["ratio"] == pytest.approx(estimate.memory_fraction / 0.2434)
    # at ncu's own duration of the call the estimate is bytes / duration / peak
    assert memory["estimated_at_ncu_duration"] == pytest.approx(
        8 * 2**20 / 5.216e-6 / 3.35e12)
    assert row["comparison"]["compute"]["ratio"] is None  # ncu's tensor pipe read 0
    assert "relu" in bench.table([row])


FAKE_NCU = """#!{python}
import sys
metrics = sys.argv[sys.argv.index("--metrics") + 1]
with open({calls!r}, "a") as f:
    f.write(metrics + "\\n")
if "{refuse}" in metrics:
    print("==ERROR== Failed to find metric {refuse}", file=sys.stderr)
    sys.exit(1)
print(open({fixture!r}).read())
"""


def fake_ncu(tmp_path: Path, refuse: str) -> tuple[str, Path]:
    """An ncu that refuses ``refuse`` and otherwise prints the relu capture."""
    calls = tmp_path / "calls.txt"
    path = tmp_path / "ncu"
    path.write_text(FAKE_NCU.format(python=sys.executable, calls=str(calls), refuse=refuse,
                                    fixture=str(RELU)))
    path.chmod(0o755)
    return str(path), calls


def test_a_metric_ncu_refuses_is_dropped_and_the_run_taken_again(tmp_path: Path) -> None:
    bench = load()
    refused = "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed"
    ncu, calls = fake_ncu(tmp_path, refused)
    options = argparse.Namespace(clock_control="none", copy_mb=1, matmul_n=16)
    got = bench.ncu_metrics(ncu, bench.cases(1, 16)[2], options)
    assert "records" in got, got
    asked = calls.read_text().splitlines()
    assert len(asked) == 2 and refused in asked[0] and refused not in asked[1]
    assert "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed" in asked[1]
    assert bench.ncu_figures(got["records"], "bf16")["duration_ms"] == pytest.approx(5.216e-3)


def test_ncu_without_permission_is_said_so_at_once(tmp_path: Path) -> None:
    bench = load()
    ncu, calls = fake_ncu(tmp_path, "dram__throughput")  # refuses the first run...
    ncu_path = Path(ncu)
    ncu_path.write_text(ncu_path.read_text().replace(
        "Failed to find metric", "ERR_NVGPUCTRPERM: no access to the counters"))
    options = argparse.Namespace(clock_control="none", copy_mb=1, matmul_n=16)
    got = bench.ncu_metrics(ncu, bench.cases(1, 16)[0], options)
    assert "performance counters" in got["error"]
    assert len(calls.read_text().splitlines()) == 1  # ...and nothing is tried again
