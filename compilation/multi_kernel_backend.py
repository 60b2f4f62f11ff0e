"""multi_kernel: a Python script mixing torch, Triton and CuPy, called through one function.

``metadata.entry_point`` names the function; the IOContract's arguments are bound to its
parameters by name (see :func:`compilation.base.call_python`). What the function returns is
the output; if it returns None, the IOContract's output and inout tensors are.

Import-time failures are compile errors with the traceback of the user's code; an exception
raised by the entry point propagates to the caller, which reports its full traceback as a
runtime error. In CPU mode torch code runs on the CPU and Triton code in its interpreter.
"""

from __future__ import annotations

from compilation.base import CompileContext, CompileError, find_callable, load_module

# Modules that exist only with a CUDA GPU (and are not installed on a CPU-only host).
GPU_ONLY_MODULES = ("cupy", "cupyx", "pycuda", "cuda", "cupti", "nvtx")
from compilation.torch_backend import TorchKernel, python_preset
from shared.models import KernelCode


class MultiKernelBackend:
    def compile(self, kernel: KernelCode, ctx: CompileContext) -> TorchKernel:
        entry_point = kernel.meta().entry_point
        if not entry_point:
            raise CompileError(
                "multi_kernel needs metadata.entry_point: the name of the function to call"
            )
        if kernel.io is None:
            raise CompileError(
                "multi_kernel needs an IOContract: its args are bound by name to the "
                f"parameters of {entry_point}()"
            )
        try:
            module = load_module(kernel.source_code, ctx, python_preset())
        except CompileError as exc:
            missing = _gpu_only_module(exc)
            if missing is not None and ctx.device == "cpu":
                raise CompileError(
                    f"this multi_kernel imports {missing}, which needs a CUDA GPU; this server "
                    "runs in CPU mode (torch and Triton code run here, CuPy and raw CUDA do "
                    "not)") from exc
            raise
        fn = find_callable(module, entry_point, "entry_point")
        # With its IOContract, the entry point runs exactly like a torch function would.
        return TorchKernel(module, fn, kernel.io, ctx.device)



def _gpu_only_module(exc: CompileError) -> str | None:
    """The GPU-only module whose import failed under ``exc``, if that is why it failed."""
    cause = exc.__cause__
    if isinstance(cause, ModuleNotFoundError) and cause.name:
        top = cause.name.split(".")[0]
        if top in GPU_ONLY_MODULES:
            return top
    return None
