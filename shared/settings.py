"""The one settings object: built at start-up from the environment, overridden by main.py flags.

Nothing reads the environment at import time; tests build ``Settings(...)`` directly or pass
their own mapping to :meth:`Settings.from_env`.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

Mode = Literal["fastapi", "mcp", "both"]
InvalidRequestStatus = Literal[400, 422]
LogFormat = Literal["text", "json"]
DevicePreference = Literal["auto", "cpu", "cuda"]
ExecutorKind = Literal["local", "ray"]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class SettingsError(ValueError):
    """An environment variable or flag has a value the server cannot use."""


@dataclass(frozen=True)
class Settings:
    host: str = "0.0.0.0"
    port: int = 8000
    log_level: str = "info"
    # "json": one JSON object per log line, for log shippers.
    log_format: LogFormat = "text"
    mode: Mode = "both"
    # GPUs jobs may use; None means every GPU the worker probe sees.
    gpu_devices: tuple[int, ...] | None = None
    # Jobs running at once: capped by the GPU count on a GPU host (one job per GPU).
    max_workers: int = 4
    # Jobs sharing one GPU: their untimed steps (compiling, correctness trials) run side by
    # side, a timing has the GPU to itself with the other jobs' processes stopped
    # (orchestration.gpu_gate). 1: a job has its GPU to itself from start to end.
    jobs_per_gpu: int = 1
    device: DevicePreference = "auto"
    enable_device_metrics: bool = False
    # Nsight Compute CLI: a name looked up on PATH (then in the usual CUDA places) or a path.
    ncu_path: str = "ncu"
    # Keep ready workers (forked, sandboxed, CUDA context created) so a job waits for none.
    spare_workers: bool = True
    # Ready workers kept per GPU (a /compare takes two: the reference/checker and the kernel).
    # None ("auto"): as many as fit in SPARE_MEMORY_SHARE of the GPU's memory (see
    # orchestration.worker_pool.auto_spares); a CPU pool keeps DEFAULT_CPU_SPARES.
    spares_per_gpu: int | None = None
    # The share of a GPU's memory the automatic spare count may hold.
    spare_memory_share: float = 0.35
    # When replacements start: "batch" (once a third of a GPU's spares are taken, all missing
    # ones at once: every worker start holds up the GPU's timings, and the driver creates
    # contexts several times faster side by side than one after another), "eager" (the moment
    # a spare is taken) or "idle" (only while no job holds that GPU: a starting worker's
    # context creation then never runs beside a job). A job that finds none ready gets one
    # started in every mode.
    spare_refill: Literal["batch", "eager", "idle"] = "batch"
    # Worker isolation: "auto" (namespaces where they work, else none, said in /health),
    # "on" (refuse to start without it) or "off".
    sandbox: Literal["auto", "on", "off"] = "auto"
    # The uid (and gid) workers run as when the server runs as root.
    sandbox_uid: int = 65534
    worker_scratch_mb: int = 4096
    worker_max_tasks: int = 4096
    # Let workers use the network (off: a worker has no network at all, loopback included).
    worker_network: bool = False
    # CPU build stage: load_inline builds run here, before a GPU is taken, this many at once.
    build_workers: int = 2
    # Reference reuse across /compare calls: outputs and timings on disk, up to this many bytes.
    ref_cache_dir: Path = field(
        default_factory=lambda: Path.home() / ".cache" / "kernel_eval" / "references"
    )
    ref_cache_bytes: int = 8 * 2**30
    # A speedup above this is flagged for review (KernelBench uses 10x).
    speedup_review_threshold: float = 10.0
    job_store_path: Path = Path("var/jobs.sqlite3")
    job_dir: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "kernel_eval_jobs")
    build_cache_dir: Path = field(
        default_factory=lambda: Path.home() / ".cache" / "kernel_eval" / "builds"
    )
    cupy_cache_dir: Path = Path("/tmp/cupy_kernel_cache")
    job_retention_hours: float = 24.0
    # Extra seconds, beyond a job's own timeout, for a worker to start and write its result.
    worker_grace_s: float = 30.0
    python_executable: str = sys.executable
    mcp_allowed_hosts: tuple[str, ...] = ()
    mcp_allowed_origins: tuple[str, ...] = ()
    # HTTP status of an invalid request: 400 as the seeds' server and clients use, or 422
    # (FastAPI's own). The body names the field either way.
    invalid_request_status: InvalidRequestStatus = 400
    # Jobs waiting for a device beyond which new submissions are refused with 429.
    max_queued_jobs: int = 1000
    # A request body larger than this is refused with 413 while it is read (shared/request_limits).
    max_request_bytes: int = 32 * 2**20
    # When set, every route but /health requires "Authorization: Bearer <api_key>".
    api_key: str | None = field(default=None, repr=False)
    # Where jobs run: "local" (this host's GPUs) or "ray" (the GPUs of the Ray cluster at
    # ray_address; see docs/SCALE_OUT.md).
    executor: ExecutorKind = "local"
    ray_address: str | None = None
    # EXECUTOR=ray: each node's own root for job files and its build and reference caches
    # ("~" is the home of the user Ray runs as on that node).
    ray_node_dir: Path = Path("~/.cache/kernel_eval/node")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read the documented environment variables (unset ones keep their defaults)."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        if "HOST" in env:
            values["host"] = env["HOST"]
        if "PORT" in env:
            values["port"] = _int(env, "PORT", low=1, high=65535)
        if "LOG_LEVEL" in env:
            values["log_level"] = env["LOG_LEVEL"].lower()
        if "LOG_FORMAT" in env:
            values["log_format"] = _choice(env, "LOG_FORMAT", ("text", "json"))
        if "SERVER_MODE" in env:
            values["mode"] = _choice(env, "SERVER_MODE", ("fastapi", "mcp", "both"))
        if env.get("GPU_DEVICE", "").strip() not in ("", "all"):
            values["gpu_devices"] = parse_gpu_list(env["GPU_DEVICE"])
        if "MAX_WORKERS" in env:
            values["max_workers"] = _int(env, "MAX_WORKERS", low=1, high=1024)
        if "JOBS_PER_GPU" in env:
            values["jobs_per_gpu"] = _int(env, "JOBS_PER_GPU", low=1, high=16)
        if "DEVICE" in env:
            values["device"] = _choice(env, "DEVICE", ("auto", "cpu", "cuda"))
        if "ENABLE_DEVICE_METRICS" in env:
            values["enable_device_metrics"] = _bool(env, "ENABLE_DEVICE_METRICS")
        elif "ENABLE_NCU" in env:  # the seeds' API guide's name for it
            values["enable_device_metrics"] = _bool(env, "ENABLE_NCU")
        if env.get("NCU_PATH", "").strip():
            values["ncu_path"] = env["NCU_PATH"].strip()
        if "SPARE_WORKERS" in env:
            values["spare_workers"] = _bool(env, "SPARE_WORKERS")
        if env.get("SPARES_PER_GPU", "auto").strip().lower() != "auto":
            values["spares_per_gpu"] = _int(env, "SPARES_PER_GPU", low=0, high=64)
        if "SPARE_REFILL" in env:
            values["spare_refill"] = _choice(env, "SPARE_REFILL", ("batch", "eager", "idle"))
        if "SPARE_MEMORY_SHARE" in env:
            values["spare_memory_share"] = _float(env, "SPARE_MEMORY_SHARE", low=0.0, high=0.9)
        if "SANDBOX" in env:
            values["sandbox"] = _choice(env, "SANDBOX", ("auto", "on", "off"))
        if "WORKER_MAX_TASKS" in env:
            values["worker_max_tasks"] = _int(env, "WORKER_MAX_TASKS", low=0, high=2**22)
        if "WORKER_SCRATCH_MB" in env:
            values["worker_scratch_mb"] = _int(env, "WORKER_SCRATCH_MB", low=16, high=2**20)
        if "SANDBOX_UID" in env:
            values["sandbox_uid"] = _int(env, "SANDBOX_UID", low=1, high=2**31 - 1)
        if "WORKER_NETWORK" in env:
            values["worker_network"] = _bool(env, "WORKER_NETWORK")
        if "BUILD_WORKERS" in env:
            values["build_workers"] = _int(env, "BUILD_WORKERS", low=1, high=256)
        if "REF_CACHE_DIR" in env:
            values["ref_cache_dir"] = Path(env["REF_CACHE_DIR"])
        if "REF_CACHE_BYTES" in env:
            values["ref_cache_bytes"] = _int(env, "REF_CACHE_BYTES", low=0, high=2**50)
        if "SPEEDUP_REVIEW_THRESHOLD" in env:
            values["speedup_review_threshold"] = _float(env, "SPEEDUP_REVIEW_THRESHOLD")
        if "JOB_STORE_PATH" in env:
            values["job_store_path"] = Path(env["JOB_STORE_PATH"])
        if "JOB_DIR" in env:
            values["job_dir"] = Path(env["JOB_DIR"])
        if "BUILD_CACHE_DIR" in env:
            values["build_cache_dir"] = Path(env["BUILD_CACHE_DIR"])
        if "CUPY_KERNEL_CACHE_DIR" in env:
            values["cupy_cache_dir"] = Path(env["CUPY_KERNEL_CACHE_DIR"])
        if "JOB_RETENTION_HOURS" in env:
            values["job_retention_hours"] = _float(env, "JOB_RETENTION_HOURS")
        if "MCP_ALLOWED_HOSTS" in env:
            values["mcp_allowed_hosts"] = _csv(env["MCP_ALLOWED_HOSTS"])
        if "MCP_ALLOWED_ORIGINS" in env:
            values["mcp_allowed_origins"] = _csv(env["MCP_ALLOWED_ORIGINS"])
        if "INVALID_REQUEST_STATUS" in env:
            status = _choice(env, "INVALID_REQUEST_STATUS", ("400", "422"))
            values["invalid_request_status"] = int(status)
        if "MAX_QUEUED_JOBS" in env:
            values["max_queued_jobs"] = _int(env, "MAX_QUEUED_JOBS", low=1, high=10_000_000)
        if "MAX_REQUEST_BYTES" in env:
            values["max_request_bytes"] = _int(env, "MAX_REQUEST_BYTES", low=1024, high=2**40)
        if env.get("API_KEY", "").strip():
            values["api_key"] = env["API_KEY"].strip()
        if "EXECUTOR" in env:
            values["executor"] = _choice(env, "EXECUTOR", ("local", "ray"))
        if env.get("RAY_ADDRESS", "").strip():
            values["ray_address"] = env["RAY_ADDRESS"].strip()
        if env.get("RAY_NODE_DIR", "").strip():
            values["ray_node_dir"] = Path(env["RAY_NODE_DIR"].strip())
        if values.get("executor") == "ray" and "ray_address" not in values:
            raise SettingsError("EXECUTOR=ray needs RAY_ADDRESS: the head node's host:port "
                                "(or 'auto' on a host that is itself a node of the cluster)")
        return cls(**values)  # type: ignore[arg-type]

    def with_overrides(self, **changes: object) -> Settings:
        """A copy with the given fields replaced; ``None`` values are ignored."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})  # type: ignore[arg-type]


def parse_gpu_list(text: str) -> tuple[int, ...]:
    try:
        ids = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise SettingsError(f"GPU_DEVICE must be 'all' or GPU ids like '0,1', got {text!r}") from exc
    if not ids or any(i < 0 for i in ids):
        raise SettingsError(f"GPU_DEVICE must list non-negative GPU ids, got {text!r}")
    return ids


def _csv(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _int(env: Mapping[str, str], name: str, low: int, high: int) -> int:
    try:
        value = int(env[name])
    except ValueError as exc:
        raise SettingsError(f"{name} must be an integer, got {env[name]!r}") from exc
    if not low <= value <= high:
        raise SettingsError(f"{name} must be in {low}..{high}, got {value}")
    return value


def _float(env: Mapping[str, str], name: str, low: float | None = None,
           high: float | None = None) -> float:
    try:
        value = float(env[name])
    except ValueError as exc:
        raise SettingsError(f"{name} must be a number, got {env[name]!r}") from exc
    if (low is not None and value < low) or (high is not None and value > high):
        raise SettingsError(f"{name} must be between {low} and {high}, got {value}")
    return value


def _bool(env: Mapping[str, str], name: str) -> bool:
    text = env[name].strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise SettingsError(f"{name} must be true or false, got {env[name]!r}")


def _choice(env: Mapping[str, str], name: str, options: tuple[str, ...]) -> str:
    value = env[name].strip().lower()
    if value not in options:
        raise SettingsError(f"{name} must be one of {', '.join(options)}, got {env[name]!r}")
    return value
