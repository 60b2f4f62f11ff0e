"""Data models of the server.

The API's wire models are defined once, in the light client package ``kernel_eval_client``
(so the client needs no server code), and re-exported here. What follows them is internal:
the job file the server hands a worker, and the result file the worker writes back.
"""

from __future__ import annotations

from typing import Literal

from kernel_eval_client.models import (
    DEVICE_METRICS_PRESETS,
    MAX_TIMEOUT_S,
    NCU_SECTIONS,
    CleanupResponse,
    ClusterInfo,
    ClusterNode,
    ClusterSlot,
    CompareBatchRequest,
    CompareBatchResult,
    CompareBatchSummary,
    CompareRequest,
    CompareResponse,
    EvaluationRequest,
    EvaluationResponse,
    GPUInfo,
    HealthResponse,
    IntegrityReport,
    JobState,
    JobStatusResponse,
    KernelCode,
    KernelExecResult,
    KernelMetadata,
    KernelType,
    LanguageInfo,
    LegacyCompareRequest,
    Outcome,
    ProblemSize,
    RuntimeStats,
    StatsResponse,
    TimingCrossCheck,
    ValidateRequest,
)
from kernel_eval_client.result_metadata import (
    DeviceMetrics,
    JitCache,
    JudgeCalibration,
    RayPlacement,
    ReferenceNote,
    ResourceUse,
    ResultMetadata,
    TimedSampleAudit,
    WorkerCalls,
)
from kernel_eval_client.robustness import RobustnessCase, RobustnessReport
from pydantic import BaseModel, Field

__all__ = [
    "DEVICE_METRICS_PRESETS",
    "MAX_TIMEOUT_S",
    "NCU_SECTIONS",
    "CleanupResponse",
    "ClusterInfo",
    "ClusterNode",
    "ClusterSlot",
    "CompareBatchRequest",
    "CompareBatchResult",
    "CompareBatchSummary",
    "CompareRequest",
    "CompareResponse",
    "DeviceMetrics",
    "EvaluationRequest",
    "EvaluationResponse",
    "GPUInfo",
    "HealthResponse",
    "IntegrityReport",
    "JitCache",
    "JobKind",
    "JobState",
    "JobStatusResponse",
    "JudgeCalibration",
    "KernelCode",
    "KernelExecResult",
    "KernelMetadata",
    "KernelType",
    "LanguageInfo",
    "LegacyCompareRequest",
    "Outcome",
    "ProblemSize",
    "RayPlacement",
    "ReferenceNote",
    "ResourceUse",
    "ResultMetadata",
    "RobustnessCase",
    "RobustnessReport",
    "RuntimeStats",
    "StatsResponse",
    "TimedSampleAudit",
    "TimingCrossCheck",
    "ValidateRequest",
    "WorkerCalls",
    "WorkerJob",
    "WorkerResult",
]

JobKind = Literal["evaluate", "compare", "validate"]


class WorkerJob(BaseModel):
    """``job_<id>_request.json``: everything a worker needs to run one job."""

    job_id: str
    kind: JobKind
    kernel: KernelCode  # the kernel evaluated, or the custom kernel of a comparison
    ref_kernel: KernelCode | None = None
    num_trials: int | None = None  # timed samples; None: the adaptive rule (shared/stopping.py)
    num_correct_trials: int = 5
    atol: float | None = None
    rtol: float | None = None
    device: Literal["cuda", "cpu"] = "cuda"
    gpu_id: int | None = None  # the physical GPU, for the result's metadata
    # GPU mode: the core a timed process is held to while it is timed (placement.timing_cores)
    timing_cores: list[int] | None = None
    enable_device_metrics: bool = False
    device_metrics_preset: str = "basic"  # see profiling/ncu.py: preset_sections()
    lock_clocks: bool = False  # profile at base clocks instead of the GPU's own
    reuse_reference: bool = True  # /compare: reuse an identical earlier reference run
    batch_id: str | None = None  # the /compare/batch this candidate belongs to
    robustness: bool = False  # /compare: the robustness cases after a pass
    problem_size: ProblemSize | None = None  # the request's FLOPs/bytes for speed of light
    work_dir: str = ""  # the server's directory for this job (never a worker's)
    cache_dir: str  # shared content-addressed build cache


class WorkerResult(BaseModel):
    """What an executor returns for one job: the verdict, typed, and where the time went.

    ``state`` is the job's final state: COMPLETED whenever the kernels got a verdict (a
    compile error or a crash is a verdict), TIMED_OUT, or FAILED when the server could not
    finish the job (``error`` says why).
    """

    state: JobState = JobState.COMPLETED
    kernel_exec_result: KernelExecResult | None = None
    ref_exec_result: KernelExecResult | None = None
    error: str | None = None  # a fault of the harness itself, or why the reference failed
    # the step a job that timed out or whose worker died was at ("timing the custom kernel")
    stage: str | None = None
    stage_timings: dict[str, float] = Field(default_factory=dict)
    # a side failed for want of GPU memory (the executor may run the job again, alone)
    out_of_memory: bool = False
