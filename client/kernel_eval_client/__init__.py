"""Python client of the Kernel Evaluation Server, and the API's wire models."""

from .io_contract import (
    ArgSpec,
    Dim3,
    DType,
    IOContract,
    IOContractBuilder,
    LaunchConfig,
    TensorData,
    TensorInit,
    TensorSpec,
    create_arange_spec,
    create_full_spec,
    create_ones_spec,
    create_randn_spec,
    create_uniform_spec,
    create_zeros_spec,
)
from .models import (
    CompareRequest,
    CompareResponse,
    EvaluationRequest,
    EvaluationResponse,
    HealthResponse,
    JobState,
    JobStatusResponse,
    KernelCode,
    KernelExecResult,
    KernelMetadata,
    KernelType,
    Outcome,
    RuntimeStats,
    StatsResponse,
    ValidateRequest,
)

__version__ = "0.1.0"
