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
DevicePreference = Literal["auto", "cpu", "cuda"]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class SettingsError(ValueError):
    """An environment variable or flag has a value the server cannot use."""


@dataclass(frozen=True)
class Settings:
    host: str = "0.0.0.0"
    port: int = 8000
    log_level: str = "info"
    mode: Mode = "both"
    # GPUs jobs may use; None means every GPU the worker probe sees.
    gpu_devices: tuple[int, ...] | None = None
    # Jobs running at once: capped by the GPU count on a GPU host (one job per GPU).
    max_workers: int = 4
    device: DevicePreference = "auto"
    enable_device_metrics: bool = False
    # Keep one pre-started worker per device slot so a job does not wait for torch to import.
    spare_workers: bool = True
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
        if "SERVER_MODE" in env:
            values["mode"] = _choice(env, "SERVER_MODE", ("fastapi", "mcp", "both"))
        if env.get("GPU_DEVICE", "").strip() not in ("", "all"):
            values["gpu_devices"] = parse_gpu_list(env["GPU_DEVICE"])
        if "MAX_WORKERS" in env:
            values["max_workers"] = _int(env, "MAX_WORKERS", low=1, high=1024)
        if "DEVICE" in env:
            values["device"] = _choice(env, "DEVICE", ("auto", "cpu", "cuda"))
        if "ENABLE_DEVICE_METRICS" in env:
            values["enable_device_metrics"] = _bool(env, "ENABLE_DEVICE_METRICS")
        if "SPARE_WORKERS" in env:
            values["spare_workers"] = _bool(env, "SPARE_WORKERS")
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
        return cls(**values)  # type: ignore[arg-type]

    def with_overrides(self, **changes: object) -> Settings:
        """A copy with the given fields replaced; ``None`` values are ignored."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


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


def _float(env: Mapping[str, str], name: str) -> float:
    try:
        return float(env[name])
    except ValueError as exc:
        raise SettingsError(f"{name} must be a number, got {env[name]!r}") from exc


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
