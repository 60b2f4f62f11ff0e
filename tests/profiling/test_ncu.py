"""The ncu pass without a GPU: presets, the command line, finding ncu, and
``collect_device_metrics`` driving a stand-in ``ncu`` that runs the real target on the CPU."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from kernel_side.ncu_target import NVTX_RANGE
from profiling.ncu import (
    BASIC_SECTIONS,
    FULL_SECTIONS,
    PERMISSION_REASON,
    build_command,
    collect_device_metrics,
    default_env,
    diagnose,
    find_ncu,
    ncu_available,
    preset_sections,
)
from shared.models import CompareRequest, EvaluationRequest, KernelCode, WorkerJob
from shared.settings import Settings

HANDMADE_CSV = Path(__file__).parent / "fixtures" / "ncu_triton_add.csv"  # captured on an H100
TORCH_KERNEL = KernelCode(
    source_code="class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
    "\ndef get_inputs():\n    return [torch.randn(64)]\n\ndef get_init_inputs():\n    return []\n",
    kernel_type="torch",
)


# ---- presets -----------------------------------------------------------------------------------


def test_presets_name_their_sections() -> None:
    assert preset_sections("basic") == BASIC_SECTIONS
    assert BASIC_SECTIONS == ("SpeedOfLight", "LaunchStats", "Occupancy")
    assert set(BASIC_SECTIONS) < set(FULL_SECTIONS)
    assert preset_sections(" Full ") == FULL_SECTIONS
    sections = preset_sections("speedoflight, WarpStateStats,SpeedOfLight")
    assert sections == ("SpeedOfLight", "WarpStateStats")


@pytest.mark.parametrize("bad", ["", "fast", "SpeedOfLight,NoSuchSection", " , "])
def test_unknown_presets_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="device metrics preset"):
        preset_sections(bad)


def test_request_validates_and_normalizes_the_preset() -> None:
    kernel = {"source_code": "x", "kernel_type": "torch"}
    request = EvaluationRequest(kernel=kernel,
                                device_metrics_preset="memoryworkloadanalysis,Occupancy")
    assert request.device_metrics_preset == "MemoryWorkloadAnalysis,Occupancy"
    assert request.lock_clocks is False
    assert EvaluationRequest(kernel=kernel).device_metrics_preset == "basic"
    compare = CompareRequest(ref_kernel=kernel, custom_kernel=kernel, device_metrics_preset="FULL",
                             lock_clocks=True)
    assert compare.device_metrics_preset == "full" and compare.lock_clocks is True
    with pytest.raises(ValidationError, match="unknown: Bogus") as info:
        EvaluationRequest(kernel=kernel, device_metrics_preset="SpeedOfLight,Bogus")
    assert "basic or full" in str(info.value)


def test_worker_job_carries_the_preset_and_clock_choice() -> None:
    job = WorkerJob(job_id="j", kind="evaluate", kernel=TORCH_KERNEL, work_dir="w", cache_dir="c",
                    device_metrics_preset="full", lock_clocks=True)
    again = WorkerJob.model_validate_json(job.model_dump_json())
    assert (again.device_metrics_preset, again.lock_clocks) == ("full", True)


# ---- the command line ----------------------------------------------------------------------------


def flag_values(command: list[str], flag: str) -> list[str]:
    return [command[i + 1] for i, word in enumerate(command) if word == flag]


def test_basic_command_profiles_only_the_nvtx_range_with_free_clocks(tmp_path: Path) -> None:
    target = ["python", "-m", "kernel_side.ncu_target", "job.json", "kernel"]
    command = build_command("/opt/ncu", "basic", tmp_path / "r.ncu-rep", False, target)
    assert command[0] == "/opt/ncu"
    assert command[-len(target):] == target
    assert "--nvtx" in command
    assert flag_values(command, "--nvtx-include") == [f"{NVTX_RANGE}/"]
    assert flag_values(command, "--clock-control") == ["none"]
    assert flag_values(command, "--target-processes") == ["all"]
    assert flag_values(command, "--section") == list(BASIC_SECTIONS)
    assert flag_values(command, "--export") == [str(tmp_path / "r.ncu-rep")]
    assert "--metrics" not in command
    # every ncu option comes before the target's argv
    assert command.index("--force-overwrite") == len(command) - len(target) - 1


def test_full_command_locks_clocks_on_request_and_adds_metric_totals(tmp_path: Path) -> None:
    command = build_command("ncu", "full", tmp_path / "r.ncu-rep", True, ["t"], max_kernels=5)
    assert flag_values(command, "--clock-control") == ["base"]
    assert flag_values(command, "--section") == list(FULL_SECTIONS)
    assert flag_values(command, "--launch-count") == ["5"]
    [metrics] = flag_values(command, "--metrics")
    assert "gpu__time_duration.sum" in metrics.split(",")
    assert "sm__sass_thread_inst_executed_op_ffma_pred_on.sum" in metrics.split(",")


def test_section_list_preset_in_the_command(tmp_path: Path) -> None:
    command = build_command("ncu", "WarpStateStats,SchedulerStats", tmp_path / "r", False, ["t"])
    assert flag_values(command, "--section") == ["WarpStateStats", "SchedulerStats"]


# ---- finding ncu ---------------------------------------------------------------------------------


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def test_find_ncu_by_path_and_on_path(tmp_path: Path) -> None:
    ncu = executable(tmp_path / "my-ncu", "#!/bin/sh\n")
    assert find_ncu(str(ncu)) == str(ncu)
    assert find_ncu(str(tmp_path / "missing")) is None
    assert find_ncu("kes-no-such-tool-anywhere") is None


def test_ncu_available_says_why_not(tmp_path: Path) -> None:
    missing = Settings(device="cuda", ncu_path=str(tmp_path / "x"))
    assert "not found" in (ncu_available(missing) or "")
    assert "CPU mode" in (ncu_available(Settings(device="cpu")) or "")
    ncu = executable(tmp_path / "ncu", "#!/bin/sh\n")
    assert ncu_available(Settings(device="cuda", ncu_path=str(ncu))) is None


def test_settings_read_ncu_path() -> None:
    assert Settings.from_env({"NCU_PATH": "/opt/nsight/ncu"}).ncu_path == "/opt/nsight/ncu"
    assert Settings.from_env({}).ncu_path == "ncu"


# ---- collect_device_metrics with a stand-in ncu -------------------------------------------------

FAKE_NCU = """#!{python}
import json, os, subprocess, sys, time
argv = sys.argv[1:]
with open({calls!r}, "a") as f:
    f.write(json.dumps({{"argv": argv, "wrapped": os.environ.get("KES_WRAPPED")}}) + "\\n")
if "--import" in argv:
    sys.stdout.write(open({csv!r}).read())
    sys.exit(0)
mode = {mode!r}
report = argv[argv.index("--export") + 1]
target = argv[argv.index("--force-overwrite") + 1:]
print("==PROF== Connected to process", os.getpid(), flush=True)
if mode == "perm":
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
          "Performance Counters on the target device 0.", flush=True)
    sys.exit(1)
if mode == "bad-metric":
    print("==ERROR== Failed to find metric sm__no_such_metric.sum", flush=True)
    sys.exit(1)
if mode == "hang":
    child = subprocess.Popen(["sleep", "60"])
    open({pidfile!r}, "w").write(str(child.pid))
    time.sleep(60)
rc = subprocess.call(target)
if rc != 0:
    sys.exit(rc)
if mode == "no-kernels":
    print("==WARNING== No kernels were profiled.", flush=True)
    sys.exit(0)
time.sleep(0.2)
open(report, "wb").write(b"not a real report")
print("==PROF== Report:", report, flush=True)
"""


class Stand:
    """A stand-in ncu and a job for it; ``collect`` runs collect_device_metrics on them."""

    def __init__(self, tmp_path: Path, mode: str, kernel: KernelCode = TORCH_KERNEL) -> None:
        self.tmp = tmp_path
        self.calls = tmp_path / "calls.jsonl"
        self.pidfile = tmp_path / "child.pid"
        self.ncu = executable(tmp_path / "ncu", FAKE_NCU.format(
            python=sys.executable, calls=str(self.calls), csv=str(HANDMADE_CSV), mode=mode,
            pidfile=str(self.pidfile),
        ))
        self.settings = Settings(device="cuda", ncu_path=str(self.ncu))
        job = WorkerJob(job_id="j1", kind="evaluate", kernel=kernel, device="cpu",
                        work_dir=str(tmp_path / "work"), cache_dir=str(tmp_path / "cache"))
        self.request = tmp_path / "job_j1_request.json"
        self.request.write_text(job.model_dump_json())

    def collect(self, preset: str = "basic", timeout_s: float = 120, **kw: object):
        return asyncio.run(collect_device_metrics(
            self.request, "kernel", self.tmp / "work", self.settings, preset, False, timeout_s,
            env=default_env(), **kw,
        ))

    def call_log(self) -> list[dict]:
        return [json.loads(line) for line in self.calls.read_text().splitlines()]


def test_collect_runs_the_target_under_ncu_and_reads_the_report(tmp_path: Path) -> None:
    stand = Stand(tmp_path, "ok")
    result = stand.collect("full")
    assert result.available, result.reason
    assert result.reason is None
    assert (result.preset, result.sections) == ("full", list(FULL_SECTIONS))
    assert result.clocks_locked is False
    assert result.reader == "csv"  # ncu_report cannot read the stand-in's report
    assert [k.name for k in result.kernels] == ["add_kernel"]
    assert result.speed_of_light["compute_throughput_pct"] > 0
    assert result.ncu_time_s is not None and result.ncu_time_s >= 0.2  # the stand-in's own sleep
    profile, imported = stand.call_log()
    assert flag_values(profile["argv"], "--nvtx-include") == [f"{NVTX_RANGE}/"]
    assert profile["argv"][-2:] == [str(stand.request.resolve()), "kernel"]
    assert imported["argv"][:2] == ["--import", str(tmp_path / "work" / "ncu_kernel.ncu-rep")]
    log = (tmp_path / "work" / "ncu_kernel.log").read_text()
    assert f"the kernel ran once inside NVTX range '{NVTX_RANGE}'" in log


FAKE_NCU_REPORT = """
class _Metric:
    def __init__(self, value, unit):
        self._value, self._unit = value, unit
    def has_value(self):
        return True
    def value(self):
        return self._value
    def unit(self):
        return self._unit

class _Action:
    def __init__(self, name, metrics):
        self._name, self._metrics = name, metrics
    def name(self):
        return self._name
    def metric_names(self):
        return tuple(self._metrics)
    def metric_by_name(self, name):
        return _Metric(*self._metrics[name]) if name in self._metrics else None

class _Range:
    def __init__(self, actions):
        self._actions = actions
    def num_actions(self):
        return len(self._actions)
    def action_by_idx(self, i):
        return self._actions[i]

class _Context:
    def num_ranges(self):
        return 1
    def range_by_idx(self, i):
        return _Range([_Action("kes_add", {
            "gpu__time_duration.sum": (2.5, "usecond"),
            "sm__throughput.avg.pct_of_peak_sustained_elapsed": (33.0, "%"),
            "launch__block_dim_x": (256, ""), "launch__block_dim_y": (1, ""),
            "launch__block_dim_z": (1, ""), "launch__block_size": (256, ""),
            "device__attribute_display_name": ("NVIDIA H100", ""),
        })])

def load_report(path):
    assert open(path, "rb").read() == b"not a real report"
    return _Context()
"""


def test_collect_reads_with_ncu_report_from_the_ncu_installation(tmp_path: Path) -> None:
    stand = Stand(tmp_path, "ok")
    extras = tmp_path / "extras" / "python"  # beside the stand-in ncu, as in an ncu install
    extras.mkdir(parents=True)
    (extras / "ncu_report.py").write_text(FAKE_NCU_REPORT)
    result = stand.collect()
    assert result.available, result.reason
    assert result.reader == "ncu_report"
    [kernel] = result.kernels
    assert (kernel.name, kernel.block_size) == ("kes_add", "(256, 1, 1)")
    assert result.timing_metrics["gpu_time_duration_sum"] == pytest.approx(2.5e-3)
    assert result.speed_of_light == {"compute_throughput_pct": 33}
    assert result.occupancy_metrics == {"block_size": 256}
    assert len(stand.call_log()) == 1  # no CSV export was needed


def test_collect_applies_the_sandbox_wrapper(tmp_path: Path) -> None:
    stand = Stand(tmp_path, "ok")
    result = stand.collect(wrap=lambda command: ["env", "KES_WRAPPED=1", *command])
    assert result.available, result.reason
    profile, imported = stand.call_log()
    assert profile["wrapped"] == "1"
    assert imported["wrapped"] is None  # reading the report runs no user code


def test_counters_not_permitted_is_a_reason_not_an_error(tmp_path: Path) -> None:
    result = Stand(tmp_path, "perm").collect()
    assert result.available is False and result.reason == PERMISSION_REASON
    assert "ERR_NVGPUCTRPERM" in result.reason
    assert result.kernels == [] and result.speed_of_light == {}
    assert result.ncu_time_s is not None


def test_ncu_errors_are_reported(tmp_path: Path) -> None:
    result = Stand(tmp_path, "bad-metric").collect()
    assert result.available is False
    assert result.reason.startswith("ncu failed (exit 1): ==ERROR== Failed to find metric")


def test_a_call_that_launches_no_kernel(tmp_path: Path) -> None:
    result = Stand(tmp_path, "no-kernels").collect()
    assert result.available is False and "profiled no kernel" in result.reason


def test_a_kernel_failing_in_the_profiling_pass(tmp_path: Path) -> None:
    broken = KernelCode(source_code="class Model(torch.nn.Module):\n    def forward(self, x)\n",
                        kernel_type="torch")
    result = Stand(tmp_path, "ok", broken).collect()
    assert result.available is False
    assert result.reason.startswith(
        "the kernel failed in the profiling pass: the kernel did not compile: SyntaxError")
    assert "SyntaxError" in result.reason


def test_missing_ncu(tmp_path: Path) -> None:
    stand = Stand(tmp_path, "ok")
    stand.settings = Settings(device="cuda", ncu_path=str(tmp_path / "nowhere" / "ncu"))
    result = stand.collect("full")
    assert result.available is False and "not found" in result.reason
    assert result.ncu_time_s is None and result.preset == "full"
    assert not stand.calls.exists()


def test_an_invalid_preset_is_a_reason(tmp_path: Path) -> None:
    result = Stand(tmp_path, "ok").collect("turbo")
    assert result.available is False and "unknown device metrics preset" in result.reason


def test_timeout_kills_ncu_and_its_children(tmp_path: Path) -> None:
    stand = Stand(tmp_path, "hang")
    started = time.monotonic()
    result = stand.collect(timeout_s=2)
    assert time.monotonic() - started < 30
    assert result.available is False and "did not finish within 2 s" in result.reason
    child = int(stand.pidfile.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.05)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (killed, not yet reaped by init) is as good as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize(("log", "rc", "report", "expected"), [
    ("==PROF== Report: r.ncu-rep", 0, True, None),
    ("==ERROR== Failed to profile kernel 'k' in process 7\n", 1, True, None),  # others are there
    ("==ERROR== ERR_NVGPUCTRPERM - no permission", 0, True, "ERR_NVGPUCTRPERM"),
    ("kes_ncu_target: error: the kernel did not compile: E\n  line 1\n==ERROR== code 3", 3, False,
     "the kernel failed in the profiling pass: the kernel did not compile: E\n  line 1"),
    ("==ERROR== Failed to find metric x\n", 1, False,
     "ncu failed (exit 1): ==ERROR== Failed to find metric x"),
    ("==WARNING== No kernels were profiled.\n", 0, False, "profiled no kernel"),
    ("Segmentation fault\n", 139, False,
     "ncu exited with 139 without a report: Segmentation fault"),
])
def test_diagnose(log: str, rc: int, report: bool, expected: str | None) -> None:
    reason = diagnose(log, rc, report)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason
