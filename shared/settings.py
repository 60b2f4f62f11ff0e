"""The one settings object: built at start-up from the environment, overridden by main.py flags.

Nothing reads the environment at import time; tests build ``Settings(...)`` directly or pass
their own mapping to :meth:`Settings.from_env`.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

Mode = Literal["fastapi", "mcp", "both"]
LogFormat = Literal["text", "json"]
DevicePreference = Literal["auto", "cpu", "cuda"]
ExecutorKind = Literal["local", "ray"]

CACHE_DIRS = {"build_cache_dir": "builds", "ref_cache_dir": "references", "jit_cache_dir": "jit"}
CPU_SLOTS = 4  # jobs at once in CPU mode unless MAX_WORKERS says otherwise

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _cache_root() -> Path:
    """Where the caches live unless CACHE_DIR says otherwise (read when settings are made)."""
    return Path.home() / ".cache" / "kernel_eval"


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
    # Jobs running at once. None: one per GPU (every GPU of the host, or of the Ray cluster),
    # or CPU_SLOTS in CPU mode. A number caps the GPUs used.
    max_workers: int | None = None
    # Jobs sharing one GPU: their untimed steps (compiling, correctness trials) run side by
    # side, a timing has the GPU to itself with the other jobs' processes stopped
    # (orchestration.gpu_gate). 1: a job has its GPU to itself from start to end.
    jobs_per_gpu: int = 1
    device: DevicePreference = "auto"
    enable_device_metrics: bool = False
    # Nsight Compute CLI: a name looked up on PATH (then in the usual CUDA places) or a path.
    ncu_path: str = "ncu"
    # Ready workers kept per GPU (a /compare takes two: the judge and the kernel's process).
    # None ("auto"): as many as fit in a share of the GPU's memory
    # (orchestration.worker_pool.auto_spares); a CPU pool keeps DEFAULT_CPU_SPARES.
    spares_per_gpu: int | None = None
    # Worker isolation: "auto" (namespaces where they work, else none, said in /health),
    # "on" (refuse to start without it) or "off".
    sandbox: Literal["auto", "on", "off"] = "auto"
    # Processes and threads a job process and all it starts may hold (a pids cgroup; 0: none).
    worker_max_tasks: int = 4096
    # Let workers use the network (off: a worker has no network at all, loopback included).
    worker_network: bool = False
    # CPU build stage: load_inline builds run here, before a GPU is taken, this many at once.
    build_workers: int = 2
    # Reference figures kept across /compare calls, on disk, up to this many bytes.
    ref_cache_dir: Path = field(default_factory=lambda: _cache_root() / "references")
    ref_cache_bytes: int = 8 * 2**30
    # A speedup above this is flagged for review (KernelBench uses 10x).
    speedup_review_threshold: float = 10.0
    job_store_path: Path = Path("var/jobs.sqlite3")
    job_dir: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "kernel_eval_jobs")
    build_cache_dir: Path = field(default_factory=lambda: _cache_root() / "builds")
    cupy_cache_dir: Path = Path("/tmp/cupy_kernel_cache")
    # The JIT compilers' caches a job's source left (Triton, CuTe DSL, TileLang, Helion, ...),
    # kept per exact source and restored for its next job, up to this many bytes (0: none).
    jit_cache_dir: Path = field(default_factory=lambda: _cache_root() / "jit")
    jit_cache_bytes: int = 2 * 2**30
    mcp_allowed_hosts: tuple[str, ...] = ()
    mcp_allowed_origins: tuple[str, ...] = ()
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

    # ---- internal: no environment variable sets these; tests pass their own values

    # False: no ready workers; each job forks its own (tests that want no background starts).
    spare_workers: bool = True
    # The uid (and gid) workers run as when the server runs as root ("nobody").
    sandbox_uid: int = 65534
    # A worker's scratch directory, /tmp and /dev/shm: each a memory filesystem of this size.
    worker_scratch_mb: int = 4096
    # The default age of the jobs /admin/cleanup-jobs removes.
    job_retention_hours: float = 24.0
    # Extra seconds, beyond a job's own timeout, for a worker to start and write its result.
    worker_grace_s: float = 30.0
    python_executable: str = sys.executable

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read the documented environment variables (unset ones keep their defaults): each
        row of :data:`ENVIRONMENT` is one variable, the field it sets and how it is read."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for var in ENVIRONMENT:
            raw = env.get(var.name)
            if raw is None or var.field in values:  # an alias after its name is ignored
                continue
            value = var.read(var.name, raw)
            if value is not _UNSET:
                values[var.field] = value
        root = values.pop("cache_dir", None)
        if isinstance(root, Path):  # CACHE_DIR: the root of the three caches
            for name, sub in CACHE_DIRS.items():
                values[name] = root / sub
        if values.get("executor") == "ray" and "ray_address" not in values:
            raise SettingsError("EXECUTOR=ray needs RAY_ADDRESS: the head node's host:port "
                                "(or 'auto' on a host that is itself a node of the cluster)")
        return cls(**values)  # type: ignore[arg-type]

    def slots(self, gpus: int) -> int:
        """Jobs at once on ``gpus`` GPUs (0: CPU mode): one per GPU, MAX_WORKERS at most."""
        if not gpus:
            return self.max_workers or CPU_SLOTS
        return gpus if self.max_workers is None else min(self.max_workers, gpus)

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


# ---- the environment, one row a variable ---------------------------------------------------

_UNSET = object()  # what a reader returns for a value that means "keep the default"
Reader = Callable[[str, str], object]


@dataclass(frozen=True)
class Var:
    name: str
    field: str
    read: Reader


def text(name: str, raw: str) -> object:
    return raw


def lower(name: str, raw: str) -> object:
    return raw.lower()


def non_blank(name: str, raw: str) -> object:
    return raw.strip() or _UNSET


def path(name: str, raw: str) -> object:
    return Path(raw)


def non_blank_path(name: str, raw: str) -> object:
    return Path(raw.strip()) if raw.strip() else _UNSET


def csv(name: str, raw: str) -> object:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def gpu_list(name: str, raw: str) -> object:
    return _UNSET if raw.strip() in ("", "all") else parse_gpu_list(raw)


def integer(low: int, high: int, auto: bool = False) -> Reader:
    def read(name: str, raw: str) -> object:
        if auto and raw.strip().lower() == "auto":
            return _UNSET
        try:
            value = int(raw)
        except ValueError as exc:
            raise SettingsError(f"{name} must be an integer, got {raw!r}") from exc
        if not low <= value <= high:
            raise SettingsError(f"{name} must be in {low}..{high}, got {value}")
        return value
    return read


def number(low: float | None = None, high: float | None = None) -> Reader:
    def read(name: str, raw: str) -> object:
        try:
            value = float(raw)
        except ValueError as exc:
            raise SettingsError(f"{name} must be a number, got {raw!r}") from exc
        if (low is not None and value < low) or (high is not None and value > high):
            raise SettingsError(f"{name} must be between {low} and {high}, got {value}")
        return value
    return read


def boolean(name: str, raw: str) -> object:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SettingsError(f"{name} must be true or false, got {raw!r}")


def choice(*options: str) -> Reader:
    def read(name: str, raw: str) -> object:
        value = raw.strip().lower()
        if value not in options:
            raise SettingsError(f"{name} must be one of {', '.join(options)}, got {raw!r}")
        return value
    return read


ENVIRONMENT: tuple[Var, ...] = (
    Var("HOST", "host", text),
    Var("PORT", "port", integer(1, 65535)),
    Var("LOG_LEVEL", "log_level", lower),
    Var("LOG_FORMAT", "log_format", choice("text", "json")),
    Var("SERVER_MODE", "mode", choice("fastapi", "mcp", "both")),
    Var("GPU_DEVICE", "gpu_devices", gpu_list),
    Var("MAX_WORKERS", "max_workers", integer(1, 1024)),
    Var("JOBS_PER_GPU", "jobs_per_gpu", integer(1, 16)),
    Var("DEVICE", "device", choice("auto", "cpu", "cuda")),
    Var("ENABLE_DEVICE_METRICS", "enable_device_metrics", boolean),
    Var("ENABLE_NCU", "enable_device_metrics", boolean),  # the seeds' API guide's name
    Var("NCU_PATH", "ncu_path", non_blank),
    Var("SPARES_PER_GPU", "spares_per_gpu", integer(0, 64, auto=True)),
    Var("SANDBOX", "sandbox", choice("auto", "on", "off")),
    Var("WORKER_MAX_TASKS", "worker_max_tasks", integer(0, 2**22)),
    Var("WORKER_NETWORK", "worker_network", boolean),
    Var("BUILD_WORKERS", "build_workers", integer(1, 256)),
    Var("CACHE_DIR", "cache_dir", path),
    Var("REF_CACHE_BYTES", "ref_cache_bytes", integer(0, 2**50)),
    Var("SPEEDUP_REVIEW_THRESHOLD", "speedup_review_threshold", number()),
    Var("JOB_STORE_PATH", "job_store_path", path),
    Var("JOB_DIR", "job_dir", path),
    Var("CUPY_KERNEL_CACHE_DIR", "cupy_cache_dir", path),
    Var("JIT_CACHE_BYTES", "jit_cache_bytes", integer(0, 2**50)),
    Var("MCP_ALLOWED_HOSTS", "mcp_allowed_hosts", csv),
    Var("MCP_ALLOWED_ORIGINS", "mcp_allowed_origins", csv),
    Var("MAX_QUEUED_JOBS", "max_queued_jobs", integer(1, 10_000_000)),
    Var("MAX_REQUEST_BYTES", "max_request_bytes", integer(1024, 2**40)),
    Var("API_KEY", "api_key", non_blank),
    Var("EXECUTOR", "executor", choice("local", "ray")),
    Var("RAY_ADDRESS", "ray_address", non_blank),
    Var("RAY_NODE_DIR", "ray_node_dir", non_blank_path),
)
