"""What an agent reads: the server's instructions, the tools' argument types with their
descriptions, and the result models that are not API wire models."""

from __future__ import annotations

from typing import Annotated

from kernel_eval_client.io_contract import IOContract
from kernel_eval_client.models import MAX_BATCH_SIZE, MAX_SOURCE_BYTES
from pydantic import BaseModel, Field

from shared.models import (
    MAX_TIMEOUT_S,
    CompareBatchResult,
    HealthResponse,
    KernelCode,
    KernelMetadata,
    KernelType,
    StatsResponse,
)

INSTRUCTIONS = """\
Compile, check and time GPU kernels (PyTorch, Triton, raw CUDA) on the server's GPUs
(or on its CPU in CPU mode: see get_server_stats for the device and the kernel types it runs).
- evaluate_kernel: time one kernel (does it compile and run, and how fast).
- compare_kernels: check a custom kernel against a reference on identical inputs, then time both.
- compare_batch: compare many candidate kernels against one reference in one call.
- validate_kernel: quick check that a kernel compiles and runs once; no timing.
- get_server_stats: GPUs, supported kernel types, queue and job counters.
- get_job_status: look up a job by the job_id any of the tools above returned.
A kernel that fails to compile, crashes or gives wrong results is reported in the result
(kernel_exec_result.outcome and its error message), not as a tool error."""

KernelSource = Annotated[
    str,
    Field(
        min_length=1, max_length=MAX_SOURCE_BYTES, description="Complete source code of the kernel."
    ),
]
KernelTypeArg = Annotated[
    KernelType,
    Field(
        description="torch: a torch.nn.Module `Model` (KernelBench format) or a function; "
        "torch_cuda: a `ModelNew` using torch.utils.cpp_extension.load_inline; "
        "triton: @triton.jit kernel(s); cuda: raw CUDA C++ __global__ kernel(s); "
        "multi_kernel: a Python script mixing them."
    ),
]
IOArg = Annotated[
    IOContract | None,
    Field(
        description="The kernel's arguments in call order, and its launch config. Required for "
        "triton and cuda; optional for torch/torch_cuda (else get_inputs() in the source is used)."
    ),
]
MetadataArg = Annotated[
    KernelMetadata | None,
    Field(
        description="Targeting: kernel_name (cuda/triton entry point; required for cuda), "
        "function_name / class_name / method_name (torch), compiler_options (cuda)."
    ),
]
CandidatesArg = Annotated[
    list[KernelCode],
    Field(
        min_length=1,
        max_length=MAX_BATCH_SIZE,
        description="The candidate kernels, each {source_code, kernel_type, io, metadata} with "
        "the meanings of compare_kernels' custom_* arguments.",
    ),
]
NumTrials = Annotated[
    int | None,
    Field(ge=1, le=100_000, description="Timed samples to take; omit for the adaptive rule "
          "(sample until the median is precise to 0.5%, 20 to 1000 samples)."),
]
NumCorrectTrials = Annotated[
    int, Field(ge=1, le=100, description="Correctness checks, each on freshly generated inputs.")
]
Tolerance = Annotated[
    float | None, Field(ge=0, description="Tolerance override (default: per-dtype defaults).")
]
TimeoutArg = Annotated[
    int, Field(ge=1, le=MAX_TIMEOUT_S, description="Seconds the job may run before it is killed.")
]
RobustnessArg = Annotated[bool, Field(description=(
    "Recheck a correct custom kernel on inputs x1e-3, x1e3, uniform, with outliers and zeros "
    "(about one correctness trial each); the cases go to metadata.robustness, the verdict "
    "stays the trials'."))]


class ServerStatus(BaseModel):
    """Result of ``get_server_stats``: the server's health and its job counters."""

    health: HealthResponse
    stats: StatsResponse


class BatchResults(BaseModel):
    """Result of ``compare_batch``: every candidate's answer, in candidate order."""

    count: int  # candidates answered
    # Answers by verdict: the custom kernel's outcome, "timeout", or "failed" (server fault).
    summary: dict[str, int]
    results: list[CompareBatchResult]
    # Jobs still unfinished when the tool stopped waiting (look them up with get_job_status).
    unfinished_job_ids: list[str] = Field(default_factory=list)
