"""IOContract: explicit kernel arguments and launch configuration.

The models and spec builders are the API's wire models (defined in ``kernel_eval_client``);
``io_contract.tensor_utils`` turns them into tensors inside a worker (it imports torch, so
the server process never imports it).
"""

from kernel_eval_client.io_contract import (
    MAX_TENSOR_ELEMENTS,
    ArgSpec,
    Dim3,
    DType,
    IOContract,
    LaunchConfig,
    TensorData,
    TensorInit,
    TensorSpec,
)

from .spec_builders import (
    IOContractBuilder,
    create_arange_spec,
    create_full_spec,
    create_ones_spec,
    create_randn_spec,
    create_uniform_spec,
    create_zeros_spec,
)

__all__ = [
    "MAX_TENSOR_ELEMENTS",
    "ArgSpec",
    "DType",
    "Dim3",
    "IOContract",
    "IOContractBuilder",
    "LaunchConfig",
    "TensorData",
    "TensorInit",
    "TensorSpec",
    "create_arange_spec",
    "create_full_spec",
    "create_ones_spec",
    "create_randn_spec",
    "create_uniform_spec",
    "create_zeros_spec",
]
