"""multi_kernel: a Python script mixing torch, Triton and CuPy, called through one function.

``metadata.entry_point`` names the function; the IOContract's arguments are bound to its
parameters by name (see :func:`compilation.base.call_python`). What the function returns is
the output; if it returns None, the IOContract's output and inout tensors are.

Import-time failures are compile errors with the traceback of the user's code; an exception
raised by the entry point propagates to the caller, which reports its full traceback as a
runtime error. In CPU mode torch code runs on the CPU and Triton code in its interpreter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from compilation.base import (
    Arguments,
    CompileContext,
    CompileError,
    bind_call,
    call_python,
    find_callable,
    load_module,
)
from compilation.torch_backend import python_preset
from kernel_eval_client.io_contract import IOContract
from shared.models import KernelCode


class MultiKernelBackend:
    def compile(self, kernel: KernelCode, ctx: CompileContext) -> MultiKernel:
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
        module = load_module(kernel.source_code, ctx, python_preset())
        fn = find_callable(module, entry_point, "entry_point")
        return MultiKernel(fn, kernel.io, ctx.device)


class MultiKernel:
    def __init__(self, fn: Callable[..., Any], io: IOContract, device: str) -> None:
        self.fn = fn
        self.io = io
        self.device = device
        self.artifacts: dict[str, str] = {}

    def make_inputs(self, trial: int) -> Arguments:
        return Arguments.from_io(self.io, self.device, trial)

    def run(self, args: Arguments) -> list[torch.Tensor]:
        with torch.no_grad():
            return call_python(self.fn, args)

    def prepare(self, args: Arguments) -> Callable[[], Any]:
        """The bare call on ``args``, for timing."""
        call = bind_call(self.fn, args)

        def timed() -> Any:
            with torch.no_grad():
                return call()

        return timed
