"""Data models of the server.

The API's wire models are defined once, in the light client package ``kernel_eval_client``
(so the client needs no server code), and re-exported here. What follows them is internal:
the job file the server hands a worker, and the result file the worker writes back.
"""

from __future__ import annotations

from typing import Literal

from kernel_eval_client.models import (
    MAX_TIMEOUT_S,
    CleanupResponse,
    CompareRequest,
    CompareResponse,
    EvaluationRequest,
    EvaluationResponse,
    GPUInfo,
    HealthResponse,
    JobState,
    JobStatusResponse,
    KernelCode,
    KernelExecResult,
    KernelMetadata,
    KernelType,
    LegacyCompareRequest,
    Outcome,
    RuntimeStats,
    StatsResponse,
    ValidateRequest,
)
from pydantic import BaseModel

__all__ = [
    "MAX_TIMEOUT_S",
    "CleanupResponse",
    "CompareRequest",
    "CompareResponse",
    "EvaluationRequest",
    "EvaluationResponse",
    "GPUInfo",
    "HealthResponse",
    "JobKind",
    "JobState",
    "JobStatusResponse",
    "KernelCode",
    "KernelExecResult",
    "KernelMetadata",
    "KernelType",
    "LegacyCompareRequest",
    "Outcome",
    "RuntimeStats",
    "StatsResponse",
    "ValidateRequest",
    "WorkerJob",
    "WorkerResult",
    "WorkerStage",
]

JobKind = Literal["evaluate", "compare", "validate"]
WorkerStage = Literal["compile", "validate", "profile", "done"]


class WorkerJob(BaseModel):
    """``job_<id>_request.json``: everything a worker needs to run one job."""

    job_id: str
    kind: JobKind
    kernel: KernelCode  # the kernel evaluated, or the custom kernel of a comparison
    ref_kernel: KernelCode | None = None
    num_trials: int = 100
    num_correct_trials: int = 5
    atol: float | None = None
    rtol: float | None = None
    device: Literal["cuda", "cpu"] = "cuda"
    gpu_id: int | None = None  # the physical GPU, for the result's metadata
    enable_device_metrics: bool = False
    work_dir: str  # per-job scratch: module files, build output
    cache_dir: str  # shared content-addressed build cache


class WorkerResult(BaseModel):
    """``job_<id>_result.json``, written atomically by the worker when it is done."""

    kernel_exec_result: KernelExecResult | None = None
    ref_exec_result: KernelExecResult | None = None
    error: str | None = None  # a fault of the harness itself, not of the kernel
