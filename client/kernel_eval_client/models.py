"""Wire models of the Kernel Evaluation Server API: requests, results, job status, health.

Defined once here (pydantic and the standard library only) and used by the server, the
worker's job files and this client alike.

A kernel's failure is data, not an exception: every evaluated kernel gets a
:class:`KernelExecResult` whose ``outcome`` says what happened (``compile_error``,
``runtime_error``, ``incorrect``, …) with a message good enough to fix the kernel from.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .io_contract import IOContract

MAX_TIMEOUT_S = 600
MAX_SOURCE_BYTES = 1_000_000


class KernelType(str, Enum):
    """What the source code is, and so which backend compiles it."""

    TORCH = "torch"  # PyTorch, KernelBench format (Model / get_inputs) or a named function
    TORCH_CUDA = "torch_cuda"  # KernelBench ModelNew with load_inline CUDA extensions
    TRITON = "triton"  # one or more @triton.jit kernels, launched from the IOContract
    CUDA = "cuda"  # raw CUDA C++ __global__ kernels (NVRTC via CuPy, or nvcc)
    MULTI_KERNEL = "multi_kernel"  # a Python script mixing torch, Triton and CuPy code


class KernelMetadata(BaseModel):
    """Per-type knobs. Unknown keys are kept (e.g. a ``description``) and ignored."""

    model_config = ConfigDict(extra="allow")

    # torch / torch_cuda targeting
    function_name: str | None = None
    class_name: str | None = None
    method_name: str | None = None
    # triton / cuda
    kernel_name: str | None = None
    # cuda
    compiler_options: list[str] | None = None
    backend: Literal["nvrtc", "nvcc"] | None = None
    jitify: bool | None = None
    return_artifacts: bool | None = None  # return PTX (and SASS where available)
    # multi_kernel
    entry_point: str | None = None


class KernelCode(BaseModel):
    """A kernel as submitted: its source, its type, and optionally its IOContract."""

    model_config = ConfigDict(extra="forbid")

    source_code: str = Field(min_length=1, max_length=MAX_SOURCE_BYTES)
    kernel_type: KernelType
    io: IOContract | None = None
    metadata: KernelMetadata | None = None

    def meta(self) -> KernelMetadata:
        return self.metadata or KernelMetadata()


class _JobParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    num_trials: int = Field(default=100, ge=1, le=100_000, description="timed samples")
    timeout: int = Field(default=120, ge=1, le=MAX_TIMEOUT_S, description="seconds")
    enable_device_metrics: bool | None = Field(
        default=None, description="collect Nsight Compute metrics (server default if null)"
    )


class EvaluationRequest(_JobParams):
    """POST /evaluate: compile, run and time one kernel."""

    kernel: KernelCode


class CompareRequest(_JobParams):
    """POST /compare: check ``custom_kernel`` against ``ref_kernel``, then time both."""

    ref_kernel: KernelCode
    custom_kernel: KernelCode
    num_correct_trials: int = Field(
        default=5, ge=1, le=100, description="correctness trials, each on fresh inputs"
    )
    atol: float | None = Field(default=None, ge=0, description="absolute tolerance override")
    rtol: float | None = Field(default=None, ge=0, description="relative tolerance override")


class ValidateRequest(BaseModel):
    """POST /validate: compile and run once (no timing, no reference)."""

    model_config = ConfigDict(extra="forbid")

    kernel: KernelCode
    timeout: int = Field(default=120, ge=1, le=MAX_TIMEOUT_S, description="seconds")


class LegacyCompareRequest(BaseModel):
    """POST / : the old ``{ref_code, custom_code}`` form, treated as /compare."""

    model_config = ConfigDict(extra="forbid")

    ref_code: str = Field(min_length=1, max_length=MAX_SOURCE_BYTES)
    custom_code: str = Field(min_length=1, max_length=MAX_SOURCE_BYTES)
    num_trials: int = Field(default=100, ge=1, le=100_000)
    timeout: int = Field(default=120, ge=1, le=MAX_TIMEOUT_S)

    def to_compare(self) -> CompareRequest:
        return CompareRequest(
            ref_kernel=KernelCode(source_code=self.ref_code, kernel_type=KernelType.TORCH),
            custom_kernel=KernelCode(
                source_code=self.custom_code, kernel_type=KernelType.TORCH_CUDA
            ),
            num_trials=self.num_trials,
            timeout=self.timeout,
        )


class Outcome(str, Enum):
    """What became of one kernel."""

    SUCCESS = "success"  # compiled and ran (and, for /compare, matched the reference)
    COMPILE_ERROR = "compile_error"  # source did not compile/import, or does not fit its IO
    RUNTIME_ERROR = "runtime_error"  # raised, crashed the worker or hit a CUDA error
    INCORRECT = "incorrect"  # ran, but its outputs do not match the reference
    TIMEOUT = "timeout"  # the job ran past its timeout and was killed
    NOT_RUN = "not_run"  # never reached (e.g. the reference failed first)


class RuntimeStats(BaseModel):
    """Timing statistics, in milliseconds."""

    mean: float
    std: float
    min: float
    max: float
    median: float
    percentile_95: float
    percentile_99: float
    num_samples: int = 0
    method: str = ""  # e.g. "cuda_event+l2_flush" or "cpu_perf_counter"
    device: Literal["cuda", "cpu"] = "cuda"


class KernelExecResult(BaseModel):
    """The verdict and the number for one kernel."""

    outcome: Outcome = Outcome.SUCCESS
    compiled: bool = False
    correctness: bool | None = None  # None when there was nothing to compare with
    runtime: float = 0.0  # mean milliseconds; 0 when not timed
    runtime_stats: RuntimeStats | None = None
    compilation_error: str | None = None
    validation_error: str | None = None
    runtime_error: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class EvaluationResponse(BaseModel):
    """Answer of POST /evaluate."""

    job_id: str
    status: Literal["success", "error"]
    kernel_exec_result: KernelExecResult | None = None
    error: str | None = None


class CompareResponse(EvaluationResponse):
    """Answer of POST /compare: ``kernel_exec_result`` is the custom kernel's."""

    ref_runtime: RuntimeStats | None = None
    ref_exec_result: KernelExecResult | None = None


class JobState(str, Enum):
    """Lifecycle of a job. Allowed transitions live in ``orchestration/job_state.py``."""

    QUEUED = "queued"  # accepted, waiting for a GPU
    RUNNING = "running"  # a worker process is on it
    COMPLETED = "completed"  # a verdict exists (which may be a failing verdict)
    TIMED_OUT = "timed_out"  # killed after its timeout
    FAILED = "failed"  # the server could not finish it (worker lost, server restart)


class JobStatusResponse(BaseModel):
    """Answer of GET /job/{job_id}."""

    job_id: str
    kind: Literal["evaluate", "compare"]
    state: JobState
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    gpu_id: int | None = None
    result: CompareResponse | None = None
    error: str | None = None


class GPUInfo(BaseModel):
    id: int
    name: str
    memory_total_mb: int | None = None


class HealthResponse(BaseModel):
    """Answer of GET /health."""

    status: Literal["healthy", "degraded"]
    compilation_service: str = "ready"
    profiling_service: str = "ready"
    gpu_available: bool
    gpu_count: int
    device: Literal["cuda", "cpu"]
    gpus: list[GPUInfo] = Field(default_factory=list)
    kernel_types: list[KernelType] = Field(default_factory=list)
    device_metrics_enabled: bool = False
    version: str = ""


class StatsResponse(BaseModel):
    """Answer of GET /stats."""

    jobs_completed: int
    jobs_failed: int
    jobs_timed_out: int
    jobs_queued: int
    jobs_running: int
    avg_runtime_ms: float  # mean wall time of finished jobs, queueing excluded
    gpu_utilization_pct: float  # share of device-slot time spent running jobs
    uptime_seconds: float
    device: Literal["cuda", "cpu"]
    gpu_count: int
    worker_slots: int


class CleanupResponse(BaseModel):
    removed_jobs: int
    removed_files: int

