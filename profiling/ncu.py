"""Device metrics of a job's kernel with Nsight Compute, in a pass of their own.

After a job's timed pass, the executor calls :func:`collect_device_metrics` for each kernel
role it wants metrics for. That runs a fresh process, :mod:`kernel_side.ncu_target`, under
``ncu``: the target compiles the kernel, warms it up outside any range and calls it once
inside the NVTX range ``kes_kernel``; ``ncu --nvtx --nvtx-include "kes_kernel/"`` profiles
only the kernels launched in that range (not the warm-up, and there is no L2 flush in that
process at all). The timings a job reports never come from this pass.

The report is read with NVIDIA's ``ncu_report`` module when it can be imported (the
``ncu-report`` package, or ``extras/python`` of the ncu installation), in a child process so
the native module never loads into the server; otherwise from ``ncu --import --csv --page
raw``. The metrics are put into the API guide's categories by
:mod:`profiling.device_metrics`.

Nothing here raises for a missing or unusable ncu, a kernel that fails in this pass, or a
report without kernels: the :class:`DeviceMetricsResult` says ``available: false`` and why,
and the job itself still succeeds.

Presets (``device_metrics_preset`` of a request): ``basic`` = :data:`BASIC_SECTIONS`
(speed of light, launch statistics, occupancy, duration); ``full`` = :data:`FULL_SECTIONS`
plus :data:`FULL_EXTRA_METRICS` (every category); or a comma-separated list of ncu section
identifiers from :data:`NCU_SECTIONS`.
"""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from profiling.device_metrics import (
    FULL_EXTRA_METRICS,
    DeviceMetricsResult,
    result_from_records,
)
from profiling.ncu_parse import (
    KernelRecord,
    ReportFormatError,
    records_from_csv,
    records_from_json,
)
from shared.models import DEVICE_METRICS_PRESETS, NCU_SECTIONS
from shared.ncu_target import ERROR_PREFIX, NVTX_RANGE
from shared.settings import Settings

PROJECT_ROOT = Path(__file__).resolve().parent.parent
BASIC_SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy")
FULL_SECTIONS = (
    "SpeedOfLight", "LaunchStats", "Occupancy", "ComputeWorkloadAnalysis",
    "MemoryWorkloadAnalysis", "MemoryWorkloadAnalysis_Tables", "SchedulerStats",
    "WarpStateStats", "SourceCounters", "SpeedOfLight_RooflineChart",
)
# A model launching more kernels than this in its one call gets the first ones profiled.
DEFAULT_MAX_KERNELS = 64
READ_TIMEOUT_S = 120.0
_NCU_PLACES = ("/usr/local/cuda/bin/ncu", "/usr/local/cuda-*/bin/ncu",
               "/opt/nvidia/nsight-compute/*/ncu", "/usr/local/NVIDIA-Nsight-Compute*/ncu")
_LOG_READ_LIMIT = 1 << 20

PERMISSION_REASON = (
    "ncu may not read the GPU's performance counters (ERR_NVGPUCTRPERM): the driver "
    "restricts them to administrators. Run the server as root (in Docker: --cap-add "
    "SYS_ADMIN), or load the NVIDIA driver with NVreg_RestrictProfilingToAdminUsers=0"
)

Wrap = Callable[[list[str]], list[str]]


# ---- presets ---------------------------------------------------------------------------------


def preset_sections(preset: str) -> tuple[str, ...]:
    """The ncu sections of ``preset``: ``basic``, ``full`` or section names (else ValueError)."""
    text = preset.strip()
    if text.lower() == "basic":
        return BASIC_SECTIONS
    if text.lower() == "full":
        return FULL_SECTIONS
    by_lower = {name.lower(): name for name in NCU_SECTIONS}
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name.lower() not in by_lower]
    if not names or unknown:
        raise ValueError(
            f"unknown device metrics preset {preset!r}: use {' or '.join(DEVICE_METRICS_PRESETS)}"
            f", or comma-separated sections from {', '.join(NCU_SECTIONS)}"
        )
    return tuple(dict.fromkeys(by_lower[name.lower()] for name in names))


# ---- finding ncu -----------------------------------------------------------------------------


def find_ncu(ncu_path: str) -> str | None:
    """The ncu executable ``ncu_path`` names: a path, or a name on PATH (``ncu`` also in the
    usual CUDA and Nsight Compute install places)."""
    if os.sep in ncu_path:
        return ncu_path if os.path.isfile(ncu_path) and os.access(ncu_path, os.X_OK) else None
    found = shutil.which(ncu_path)
    if found or ncu_path != "ncu":
        return found
    for pattern in _NCU_PLACES:
        for candidate in sorted(glob.glob(pattern), reverse=True):
            if os.access(candidate, os.X_OK):
                return candidate
    return None


def ncu_available(settings: Settings) -> str | None:
    """None when device metrics can be collected here, else the reason they cannot."""
    if settings.device == "cpu":
        return "device metrics need a CUDA GPU; this server runs in CPU mode"
    if find_ncu(settings.ncu_path) is None:
        return (
            f"Nsight Compute (ncu) was not found: {settings.ncu_path!r} is not an executable "
            "on PATH, and none is under /usr/local/cuda or /opt/nvidia/nsight-compute; install "
            "Nsight Compute or set NCU_PATH"
        )
    return None


# ---- the command -----------------------------------------------------------------------------


def build_command(
    ncu_path: str,
    preset: str,
    report_path: Path,
    lock_clocks: bool,
    target_argv: list[str],
    *,
    max_kernels: int = DEFAULT_MAX_KERNELS,
) -> list[str]:
    """The ncu command line that profiles ``target_argv``'s NVTX range into ``report_path``."""
    command = [
        ncu_path,
        "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/",  # trailing "/": a push/pop range
        "--target-processes", "all",
        "--clock-control", "base" if lock_clocks else "none",
        "--cache-control", "all",
        "--launch-count", str(max_kernels),
    ]
    for section in preset_sections(preset):
        command += ["--section", section]
    if preset.strip().lower() == "full":
        command += ["--metrics", ",".join(FULL_EXTRA_METRICS)]
    command += ["--export", str(report_path), "--force-overwrite", *target_argv]
    return command


def target_argv(python: str, job_request_path: Path, role: str) -> list[str]:
    return [python, "-m", "kernel_side.ncu_target", str(job_request_path), role]


# ---- collecting ------------------------------------------------------------------------------


async def collect_device_metrics(
    job_request_path: Path,
    role: str,
    work_dir: Path,
    settings: Settings,
    preset: str = "basic",
    lock_clocks: bool = False,
    timeout_s: float = 300.0,
    *,
    wrap: Wrap | None = None,
    env: Mapping[str, str] | None = None,
) -> DeviceMetricsResult:
    """Profile one kernel role of a job under ncu and return its device metrics.

    ``job_request_path``: the job's ``WorkerJob`` JSON; ``role``: ``kernel``/``custom`` (the
    job's kernel) or ``ref`` (its reference). ``work_dir`` receives the report
    (``ncu_<role>.ncu-rep``), ncu's log and the CSV export. ``timeout_s`` bounds the ncu run;
    past it the process group is killed. ``wrap`` turns the ncu command into the sandboxed
    one; ``env`` is the environment of the ncu run (the worker's: CUDA_VISIBLE_DEVICES, build
    caches), by default this process's with the project on PYTHONPATH.

    Never raises for ncu or kernel trouble: the result says ``available: false`` and why.
    """
    work_dir = Path(work_dir)
    base: dict[str, Any] = {"preset": preset, "clocks_locked": lock_clocks}
    try:
        base["sections"] = list(preset_sections(preset))
    except ValueError as exc:
        return DeviceMetricsResult.unavailable(str(exc), **base)
    problem = ncu_available(settings)
    ncu = find_ncu(settings.ncu_path)
    if problem is not None or ncu is None:
        return DeviceMetricsResult.unavailable(problem or "ncu was not found", **base)

    work_dir.mkdir(parents=True, exist_ok=True)
    report = work_dir / f"ncu_{role}.ncu-rep"
    log = work_dir / f"ncu_{role}.log"
    report.unlink(missing_ok=True)
    command = build_command(
        ncu, preset, report, lock_clocks,
        target_argv(settings.python_executable, Path(job_request_path).resolve(), role),
    )
    if wrap is not None:
        command = wrap(command)
    started = time.monotonic()
    rc, timed_out = await _run(command, log, dict(env) if env is not None else default_env(),
                               timeout_s)
    ncu_time_s = time.monotonic() - started
    base["ncu_time_s"] = round(ncu_time_s, 3)
    if timed_out:
        return DeviceMetricsResult.unavailable(
            f"ncu did not finish within {timeout_s:g} s and was stopped; the 'basic' preset "
            "or fewer sections take less time", **base)
    reason = diagnose(_read_log(log), rc, report.exists())
    if reason is not None:
        return DeviceMetricsResult.unavailable(reason, **base)

    try:
        records, reader = await read_report(ncu, report, work_dir, role, settings)
    except (ReportFormatError, OSError) as exc:
        return DeviceMetricsResult.unavailable(f"could not read ncu's report: {exc}", **base)
    if not records:
        return DeviceMetricsResult.unavailable(_no_kernels_reason(), **base)
    return result_from_records(records, reader=reader, **base)


def diagnose(log_text: str, returncode: int, report_exists: bool) -> str | None:
    """Why an ncu run gave no metrics, from its output (None: go and read the report).

    Counters not permitted and a failing kernel are fatal whatever was written; otherwise a
    report is read even when ncu complained (e.g. about one of several kernels).
    """
    if "ERR_NVGPUCTRPERM" in log_text:
        return PERMISSION_REASON
    if ERROR_PREFIX in log_text:  # the target's own message, then its traceback lines
        after = log_text.split(ERROR_PREFIX, 1)[1].splitlines()
        detail = "\n".join(line for line in after if not line.startswith("=="))
        return "the kernel failed in the profiling pass: " + _clip(detail)
    if report_exists:
        return None
    ncu_errors = [line for line in log_text.splitlines() if line.startswith("==ERROR==")]
    if ncu_errors:
        return f"ncu failed (exit {returncode}): " + _clip("\n".join(ncu_errors[:5]))
    if "No kernels were profiled" in log_text or returncode == 0:
        return _no_kernels_reason()
    return f"ncu exited with {returncode} without a report: " + _clip(log_text[-2000:])


def _no_kernels_reason() -> str:
    return (
        f"ncu profiled no kernel inside the NVTX range '{NVTX_RANGE}': the kernel's call "
        "launched no GPU kernel"
    )


async def read_report(
    ncu: str, report: Path, work_dir: Path, role: str, settings: Settings
) -> tuple[list[KernelRecord], str]:
    """The report's kernels, read by ``ncu_report`` if it is importable, else from ncu's CSV."""
    out = work_dir / f"ncu_{role}.records.json"
    out.unlink(missing_ok=True)
    rc, timed_out = await _run(
        [settings.python_executable, "-m", "profiling.ncu_parse", str(report), str(out),
         "--ncu", ncu],
        work_dir / f"ncu_{role}.reader.log", default_env(), READ_TIMEOUT_S,
    )
    if rc == 0 and not timed_out and out.exists():
        records = records_from_json(out.read_text())
        if records:
            return records, "ncu_report"
    # ncu_report is missing, failed, or found nothing (it reads a report it does not
    # understand as empty): ncu's own CSV export decides.
    csv_path = work_dir / f"ncu_{role}.csv"
    rc, timed_out = await _run(
        [ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"],
        csv_path, default_env(), READ_TIMEOUT_S, stderr_to_stdout=False,
    )
    if timed_out or rc != 0:
        raise ReportFormatError(f"ncu --import exited with {rc}: {_clip(_read_log(csv_path))}")
    return records_from_csv(csv_path.read_text(errors="replace")), "csv"


def default_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if p
    )
    env["PYTHONUNBUFFERED"] = "1"
    return env


async def _run(
    argv: list[str], output: Path, env: dict[str, str], timeout_s: float,
    *, stderr_to_stdout: bool = True,
) -> tuple[int, bool]:
    """Run ``argv`` in its own process group, output to ``output``; (exit code, timed out)."""
    with output.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out,
            stderr=asyncio.subprocess.STDOUT if stderr_to_stdout else asyncio.subprocess.DEVNULL,
            env=env, cwd=str(PROJECT_ROOT), start_new_session=True,
        )
        try:
            return await asyncio.wait_for(proc.wait(), timeout_s), False
        except asyncio.TimeoutError:
            _kill_group(proc.pid)
            await proc.wait()
            return proc.returncode if proc.returncode is not None else -9, True
        except asyncio.CancelledError:
            _kill_group(proc.pid)
            raise


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _read_log(path: Path) -> str:
    """The log's text; of a huge one (a kernel that prints), its head and tail."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            if size <= 2 * _LOG_READ_LIMIT:
                return f.read().decode(errors="replace")
            head = f.read(_LOG_READ_LIMIT)
            f.seek(size - _LOG_READ_LIMIT)
            return (head + b"\n...\n" + f.read()).decode(errors="replace")
    except OSError:
        return ""


def _clip(text: str, limit: int = 2000) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = [
    "BASIC_SECTIONS",
    "DEFAULT_MAX_KERNELS",
    "FULL_SECTIONS",
    "DeviceMetricsResult",
    "build_command",
    "collect_device_metrics",
    "find_ncu",
    "ncu_available",
    "preset_sections",
]
