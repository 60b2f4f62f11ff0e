"""Which backend compiles which kernel type: the one place that says so.

Backends are named by import path and imported on first use, inside the worker: they pull
in torch, Triton or CuPy, which the server process never imports.
"""

from __future__ import annotations

import importlib

from compilation.base import CompileError, KernelBackend
from shared.models import KernelType

BACKENDS: dict[KernelType, str] = {
    KernelType.TORCH: "compilation.torch_backend:TorchBackend",
    KernelType.TORCH_CUDA: "compilation.torch_cuda_backend:TorchCudaBackend",
    KernelType.TRITON: "compilation.triton_backend:TritonBackend",
    KernelType.CUDA: "compilation.cuda_backend:CudaBackend",
    KernelType.MULTI_KERNEL: "compilation.multi_kernel_backend:MultiKernelBackend",
}


def available_kernel_types() -> list[KernelType]:
    return [t for t in KernelType if t in BACKENDS]


def get_backend(kernel_type: KernelType) -> KernelBackend:
    path = BACKENDS.get(kernel_type)
    if path is None:
        raise CompileError(
            f"kernel_type '{kernel_type.value}' has no backend in this server yet; "
            f"supported: {', '.join(t.value for t in available_kernel_types())}"
        )
    module_name, class_name = path.split(":")
    backend_class = getattr(importlib.import_module(module_name), class_name)
    return backend_class()
