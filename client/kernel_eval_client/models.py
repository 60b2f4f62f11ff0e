"""Wire models of the Kernel Evaluation Server API: requests, results, job status, health.

Defined once here (pydantic and the standard library only) and used by the server, the
worker's job files and this client alike.

A kernel's failure is data, not an exception: every evaluated kernel gets a
:class:`KernelExecResult` whose ``outcome`` says what happened (``compile_error``,
``runtime_error``, ``incorrect``, …) with a message good enough to fix the kernel from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from ._cuda_source import cuda_kernel_names
from ._request_model import RequestModel
from .io_contract import IOContract
from .result_metadata import ResultMetadata

MAX_TIMEOUT_S = 600
MAX_SOURCE_BYTES = 1_000_000
# Candidates one POST /compare/batch may carry.
MAX_BATCH_SIZE = 1000

# Nsight Compute sections a request may name in ``device_metrics_preset`` (ncu's identifiers).
NCU_SECTIONS = (
    "ComputeWorkloadAnalysis", "InstructionStats", "LaunchStats", "MemoryWorkloadAnalysis",
    "MemoryWorkloadAnalysis_Chart", "MemoryWorkloadAnalysis_Tables", "NumaAffinity", "Nvlink",
    "Nvlink_Tables", "Nvlink_Topology", "Occupancy", "PmSampling", "PmSampling_WarpStates",
    "SchedulerStats", "SourceCounters", "SpeedOfLight", "SpeedOfLight_RooflineChart",
    "SpeedOfLight_HierarchicalDoubleRooflineChart", "SpeedOfLight_HierarchicalHalfRooflineChart",
    "SpeedOfLight_HierarchicalSingleRooflineChart", "SpeedOfLight_HierarchicalTensorRooflineChart",
    "WarpStateStats", "WorkloadDistribution",
)
DEVICE_METRICS_PRESETS = ("basic", "full")


class KernelType(str, Enum):
    """What the source code is, and so which backend compiles it."""

    TORCH = "torch"  # PyTorch, KernelBench format (Model / get_inputs) or a named function
    TORCH_CUDA = "torch_cuda"  # KernelBench ModelNew with load_inline CUDA extensions
    TRITON = "triton"  # one or more @triton.jit kernels, launched from the IOContract
    CUDA = "cuda"  # raw CUDA C++ __global__ kernels (NVRTC via CuPy, or nvcc)
    MULTI_KERNEL = "multi_kernel"  # a Python script mixing torch, Triton and CuPy code


class KernelMetadata(RequestModel):
    """Per-type knobs. Unknown keys are ignored (and named in the response's ``warnings``)."""

    description: str | None = None  # free text for the submitter's records; not used
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


class KernelCode(RequestModel):
    """A kernel as submitted: its source, its type, and optionally its IOContract.

    A ``kernel_name`` key beside ``source_code`` (as the seeds' clients send it) is read as
    ``metadata.kernel_name``.
    """

    source_code: str = Field(min_length=1, max_length=MAX_SOURCE_BYTES)
    kernel_type: KernelType
    io: IOContract | None = None
    metadata: KernelMetadata | None = None

    def meta(self) -> KernelMetadata:
        return self.metadata or KernelMetadata()

    @classmethod
    def _rename(cls, data: dict[str, Any]) -> dict[str, Any]:
        data = super()._rename(data)
        name, meta = data.get("kernel_name"), data.get("metadata")
        if name is None:
            return data
        if isinstance(meta, KernelMetadata) and meta.kernel_name is None:
            data["metadata"] = meta.model_copy(update={"kernel_name": data.pop("kernel_name")})
        elif meta is None or (isinstance(meta, Mapping) and "kernel_name" not in meta):
            data["metadata"] = {**(meta or {}), "kernel_name": data.pop("kernel_name")}
        return data


def _check_runnable(kernel: KernelCode) -> KernelCode:
    """``kernel``, or a validation error where it cannot run by construction.

    A kernel whose arguments cannot be inferred (triton, cuda, multi_kernel) needs an
    IOContract; a multi_kernel script needs its entry point named; a cuda source with several
    ``__global__`` kernels needs the one to launch named. Such a request is refused as invalid,
    the error located at the missing field, instead of being queued for a compile error.
    """
    problems: list[tuple[tuple[str, ...], str]] = []
    kind, meta = kernel.kernel_type, kernel.meta()
    if kernel.io is None and kind in _NEEDS_IO:
        problems.append(
            (("io",), f"kernel_type '{kind.value}' needs an IOContract in 'io': {_NEEDS_IO[kind]}")
        )
    if kind is KernelType.MULTI_KERNEL and not meta.entry_point:
        message = "kernel_type 'multi_kernel' needs metadata.entry_point: the function to call"
        problems.append((("metadata", "entry_point"), message))
    if kind is KernelType.CUDA and not meta.kernel_name:
        names = cuda_kernel_names(kernel.source_code)
        if len(names) > 1:
            message = (
                f"the source defines several __global__ kernels ({', '.join(names)}); say "
                "which one to launch with metadata.kernel_name"
            )
            problems.append((("metadata", "kernel_name"), message))
    if problems:
        raise ValidationError.from_exception_data(
            "KernelCode",
            [
                InitErrorDetails(
                    type=PydanticCustomError("kernel_cannot_run", text), loc=loc, input=None
                )
                for loc, text in problems
            ],
        )
    return kernel


_NEEDS_IO = {
    KernelType.TRITON: "the kernel's arguments in call order (is_meta for tl.constexpr ones) "
    "and launch.grid",
    KernelType.CUDA: "the kernel's parameters in order, and launch.grid and launch.block",
    KernelType.MULTI_KERNEL: "its args are bound by name to the entry point's parameters",
}


_INT64_MAX = 2**63 - 1


class ProblemSize(RequestModel):
    """The work one call of the problem does, as the submitter states it: for the speed-of-light
    figures of a result, where the server's own count misses it (a custom op, a Triton or CUDA
    reference, elementwise work its FLOP counter counts as 0).

    A figure given here replaces the server's count of it; one left out is counted. ``flops``:
    floating-point operations (integer ops for ``int8``) of one call, a multiply-add counting
    2; ``bytes``: the bytes one call must read and write at least (each input, weight and output
    once); ``dtype``: which peak rate the FLOPs run at (``tf32`` for float32 matmuls on tensor
    cores).
    """

    flops: int | None = Field(default=None, ge=0, le=_INT64_MAX,
                              description="FLOPs of one call (a multiply-add is 2)")
    bytes: int | None = Field(default=None, ge=1, le=_INT64_MAX,
                              description="bytes one call must read and write at least")
    # the keys of the server's peak-figure table (profiling/gpu_peaks.py: DTYPES)
    dtype: Literal["fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8"] | None = Field(
        default=None, description="the dtype the FLOPs run in (which peak rate applies)")

    @model_validator(mode="after")
    def _says_something(self) -> ProblemSize:
        if self.flops is None and self.bytes is None:
            raise ValueError("problem_size needs flops, bytes or both")
        if self.dtype is not None and self.flops is None:
            raise ValueError("problem_size.dtype says what the FLOPs run in: give flops too")
        return self


class _JobParams(RequestModel):
    RENAMED: ClassVar[Mapping[str, str]] = {"collect_device_metrics": "enable_device_metrics"}

    num_trials: int | None = Field(
        default=None, ge=1, le=100_000,
        description="timed samples; null: sample until the median is precise (20 to 1000)",
    )
    timeout: int = Field(default=120, ge=1, le=MAX_TIMEOUT_S, description="seconds")
    enable_device_metrics: bool | None = Field(
        default=None, description="collect Nsight Compute metrics (server default if null)"
    )
    device_metrics_preset: str = Field(
        default="basic",
        description="'basic', 'full', or comma-separated Nsight Compute section names",
    )
    lock_clocks: bool = Field(
        default=False, description="profile at base clocks (ncu --clock-control base)"
    )
    problem_size: ProblemSize | None = Field(
        default=None,
        description="the problem's FLOPs and bytes per call, for the speed-of-light figures "
        "(where given, they replace the server's count)",
    )

    @field_validator("device_metrics_preset")
    @classmethod
    def _known_preset(cls, value: str) -> str:
        return _device_metrics_preset(value)


def _device_metrics_preset(value: str) -> str:
    """``value`` in canonical spelling, or a ValueError naming what is accepted."""
    text = value.strip()
    if text.lower() in DEVICE_METRICS_PRESETS:
        return text.lower()
    by_lower = {name.lower(): name for name in NCU_SECTIONS}
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name.lower() not in by_lower]
    if not names or unknown:
        raise ValueError(
            f"device_metrics_preset must be {' or '.join(DEVICE_METRICS_PRESETS)}, or "
            f"comma-separated Nsight Compute sections from: {', '.join(NCU_SECTIONS)}"
            + (f"; unknown: {', '.join(unknown)}" if unknown else "")
        )
    return ",".join(dict.fromkeys(by_lower[name.lower()] for name in names))


class EvaluationRequest(_JobParams):
    """POST /evaluate: compile, run and time one kernel."""

    kernel: KernelCode

    _kernel_runs = field_validator("kernel")(_check_runnable)


class _CompareParams(_JobParams):
    """The parameters of a comparison, besides its kernels (shared by /compare and its batch)."""

    num_correct_trials: int = Field(
        default=5, ge=1, le=100, description="correctness trials, each on fresh inputs"
    )
    atol: float | None = Field(default=None, ge=0, description="absolute tolerance override")
    rtol: float | None = Field(default=None, ge=0, description="relative tolerance override")
    reuse_reference: bool = Field(
        default=True,
        description="reuse the reference's outputs and timing from an earlier identical "
        "comparison (same reference, inputs, settings and GPU type); false runs it afresh",
    )
    robustness: bool = Field(
        default=False,
        description="after a pass, check the candidate again on inputs at other scales "
        "(x1e-3, x1e3), distributions (uniform, outliers, zeros) and the shapes the problem "
        "declares; costs one reference call and one candidate call per case (metadata."
        "robustness lists them; the verdict stays the trials')",
    )


class CompareRequest(_CompareParams):
    """POST /compare: check ``custom_kernel`` against ``ref_kernel``, then time both."""

    ref_kernel: KernelCode
    custom_kernel: KernelCode

    _kernels_run = field_validator("ref_kernel", "custom_kernel")(_check_runnable)


class CompareBatchRequest(_CompareParams):
    """POST /compare/batch: each of ``custom_kernels`` against one ``ref_kernel``.

    Every candidate becomes an ordinary /compare job with the parameters given here; the
    answers stream back as :class:`CompareBatchResult` lines, then a
    :class:`CompareBatchSummary`.
    """

    ref_kernel: KernelCode
    custom_kernels: list[Annotated[KernelCode, AfterValidator(_check_runnable)]] = Field(
        min_length=1, max_length=MAX_BATCH_SIZE, description="the candidates, in order"
    )

    _ref_runs = field_validator("ref_kernel")(_check_runnable)

    def requests(self) -> list[CompareRequest]:
        """The /compare request of each candidate, in order."""
        params = {name: getattr(self, name) for name in _CompareParams.model_fields}
        return [
            CompareRequest(ref_kernel=self.ref_kernel, custom_kernel=kernel, **params)
            for kernel in self.custom_kernels
        ]


class ValidateRequest(RequestModel):
    """POST /validate: compile and run once (no timing, no reference)."""

    kernel: KernelCode
    timeout: int = Field(default=120, ge=1, le=MAX_TIMEOUT_S, description="seconds")

    _kernel_runs = field_validator("kernel")(_check_runnable)


class LegacyCompareRequest(RequestModel):
    """POST / : the old ``{ref_code, custom_code}`` form, treated as /compare."""

    ref_code: str = Field(min_length=1, max_length=MAX_SOURCE_BYTES)
    custom_code: str = Field(min_length=1, max_length=MAX_SOURCE_BYTES)
    num_trials: int | None = Field(default=None, ge=1, le=100_000)
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


class TimingCrossCheck(BaseModel):
    """The event figure beside an independent measure of the same calls (milliseconds)."""

    method: str  # the independent measure: "device_activity" (all streams) or "host_sync"
    event_ms: float  # median of the CUDA-event samples
    independent_ms: float  # the independent measure per call
    tolerance: str  # when the two are said to disagree


class IntegrityReport(BaseModel):
    """What was checked to make the verdict and the number hard to game, and what looked off.

    ``suspicious`` results are reported, not rejected: a reviewer decides. When a timing
    cross-check disagrees, the larger (honest) figure is the one in ``runtime_stats``.
    """

    checks: list[str] = Field(default_factory=list)
    suspicious: bool = False
    reasons: list[str] = Field(default_factory=list)
    timing: TimingCrossCheck | None = None


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
    integrity: IntegrityReport | None = None
    metadata: ResultMetadata = Field(default_factory=ResultMetadata)  # see result_metadata.py


class EvaluationResponse(BaseModel):
    """Answer of POST /evaluate."""

    job_id: str
    status: Literal["success", "error"]
    kernel_exec_result: KernelExecResult | None = None
    error: str | None = None
    # Request keys this server ignored (unknown fields): a typo shows here, not as an error.
    warnings: list[str] = Field(default_factory=list)
    # Where the job's wall time went, in milliseconds: queue_wait, worker_wait, build,
    # compile, inputs, correctness, warmup, timing, robustness (/compare with robustness on),
    # audit (the judge's check of timed samples, /compare), handback, total (those that
    # applied).
    stage_timings: dict[str, float] = Field(default_factory=dict)


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


class CompareBatchResult(BaseModel):
    """A line of the POST /compare/batch stream: one candidate's answer, sent as it finishes."""

    index: int  # the candidate's position in ``custom_kernels``
    job_id: str
    state: JobState
    status_code: int  # the HTTP status POST /compare would have answered this job with
    response: CompareResponse

    @property
    def verdict(self) -> str:
        """What the summary counts this answer as: the custom kernel's outcome, ``timeout``
        for a job killed at its timeout, ``failed`` for a job the server could not finish."""
        if self.state is JobState.TIMED_OUT:
            return Outcome.TIMEOUT.value
        if self.state is not JobState.COMPLETED:
            return "failed"
        result = self.response.kernel_exec_result
        return (result.outcome if result is not None else Outcome.NOT_RUN).value


BATCH_VERDICTS = (*(outcome.value for outcome in Outcome), "failed")


class CompareBatchSummary(BaseModel):
    """The last line of the POST /compare/batch stream, once every candidate is answered."""

    done: Literal[True] = True
    count: int  # candidate lines sent
    summary: dict[str, int]  # answers by verdict (see CompareBatchResult.verdict), zeros too
    # Request keys this server ignored (unknown fields), as in the other answers' warnings.
    warnings: list[str] = Field(default_factory=list)

    @classmethod
    def of(
        cls, results: Iterable[CompareBatchResult], warnings: list[str] | None = None
    ) -> CompareBatchSummary:
        """The summary of ``results``."""
        counts = dict.fromkeys(BATCH_VERDICTS, 0)
        for result in results:
            counts[result.verdict] += 1
        return cls(count=sum(counts.values()), summary=counts, warnings=warnings or [])


class GPUInfo(BaseModel):
    id: int
    name: str
    memory_total_mb: int | None = None
    uuid: str | None = None  # the driver's "GPU-..." id (NVML's name for the GPU)


class ClusterSlot(BaseModel):
    """One job slot of a Ray cluster: a GPU (in CPU mode a unit of the ``kes_slot`` resource)
    held by one Ray actor, which runs one job at a time."""

    index: int
    state: Literal["starting", "idle", "busy", "lost"]
    node_id: str | None = None  # the Ray node the slot's actor runs on (None until it started)
    address: str | None = None  # that node's IP address
    gpu_id: int | None = None  # the GPU on that node, None in CPU mode
    pid: int | None = None  # the actor's process on that node
    job_id: str | None = None  # the job it runs now
    isolation: str = "none"  # the sandbox in force for its workers (as HealthResponse.isolation)


class ClusterNode(BaseModel):
    """One node of the Ray cluster, as Ray's control store sees it."""

    node_id: str
    address: str
    alive: bool
    gpus: int  # GPUs the node offers (in CPU mode: units of the ``kes_slot`` resource)
    slots: int  # this server's slots placed on it
    busy: int  # of those, the ones running a job now


class ClusterInfo(BaseModel):
    """``EXECUTOR=ray``: where jobs run. Absent when they run on the server's own host."""

    address: str  # the Ray cluster's address (RAY_ADDRESS)
    resource: Literal["GPU", "kes_slot"]  # what one slot holds on its node
    nodes: list[ClusterNode] = Field(default_factory=list)
    slots: list[ClusterSlot] = Field(default_factory=list)
    busy: int = 0  # slots running a job
    lost: int = 0  # slots whose actor or node was lost and has not answered again


class LanguageInfo(BaseModel):
    """A kernel language a ``torch`` kernel may be written in beside torch and Triton."""

    name: str  # "cute_dsl", "tilelang", "helion", "cutile"
    title: str
    module: str  # what a kernel imports
    distribution: str  # its PyPI package
    version: str | None = None  # installed version; None when it is not installed
    available: bool = False  # whether kernels in it can run on this server
    reason: str | None = None  # why not, when not


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
    # the kernel languages beside torch and Triton (CuTe DSL, TileLang, Helion, cuTile)
    languages: list[LanguageInfo] = Field(default_factory=list)
    device_metrics_enabled: bool = False
    version: str = ""
    # The sandbox workers run in: "namespaces" (own pid/net/ipc/mount namespaces), with
    # "+uid" when they also run under their own unprivileged uid; "none" when unavailable.
    isolation: str = "none"
    isolation_detail: str = ""
    cluster: ClusterInfo | None = None


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
    # Mean milliseconds per stage over finished jobs (see EvaluationResponse.stage_timings).
    stage_means_ms: dict[str, float] = Field(default_factory=dict)
    # Hits and lookups per cache: "reference" (reused reference results), "build".
    cache: dict[str, dict[str, int]] = Field(default_factory=dict)
    ready_workers: int = 0
    cluster: ClusterInfo | None = None


class CleanupResponse(BaseModel):
    removed_jobs: int
    removed_files: int

