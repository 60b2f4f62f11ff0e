"""PyTorch kernels: KernelBench's ``Model``/``ModelNew`` format, or a named function.

What is called:
- ``metadata.function_name``: that module-level function;
- otherwise ``metadata.class_name`` (default ``ModelNew`` if the source defines it, else
  ``Model``), built with ``get_init_inputs()`` after a fixed seed, so a reference and a
  custom model get identical weights; its ``metadata.method_name`` (default ``forward``).

Inputs come from the IOContract when there is one, else from ``get_inputs()`` under a seed
that changes per trial, else one ``float32[1024]`` normal tensor per required parameter. A
source may declare other sizes of its inputs for the robustness cases of a comparison
(``get_robustness_inputs()``: :meth:`TorchKernel.robustness_inputs`).
"""

from __future__ import annotations

import inspect
import math
import random
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch
from kernel_eval_client.io_contract import IOContract

from compilation.base import (
    Arguments,
    CompileContext,
    CompileError,
    InputError,
    bind_call,
    call_python,
    find_callable,
    load_module,
    returned_outputs,
    user_traceback,
)
from compilation.languages import check_source
from io_contract.tensor_utils import trial_seed
from shared.models import KernelCode

INIT_SEED = 42  # weights of Model and ModelNew are drawn after this seed, as in KernelBench
INPUT_SEED = 1234
AUTO_INPUT_SHAPE = (1024,)


def python_preset() -> dict[str, Any]:
    """Names a KernelBench source may use without importing them."""
    return {"torch": torch, "nn": torch.nn, "F": torch.nn.functional, "math": math}


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed % 2**32)
    except ImportError:  # pragma: no cover - numpy ships with torch
        pass


class TorchBackend:
    def compile(self, kernel: KernelCode, ctx: CompileContext) -> TorchKernel:
        check_source(kernel.source_code, ctx.device)  # CuTe DSL, TileLang, Helion, cuTile
        module = load_module(kernel.source_code, ctx, python_preset())
        return TorchKernel(module, resolve_entry(module, kernel, ctx), kernel.io, ctx.device)


def resolve_entry(module: ModuleType, kernel: KernelCode, ctx: CompileContext) -> Callable[..., Any]:
    """The callable ``kernel.metadata`` targets, with its model built on ``device``."""
    meta = kernel.meta()
    if meta.function_name:
        return find_callable(module, meta.function_name, "function")
    class_name = meta.class_name or ("ModelNew" if hasattr(module, "ModelNew") else "Model")
    cls = find_callable(module, class_name, "class")
    init_inputs: list[Any] = []
    get_init_inputs = getattr(module, "get_init_inputs", None) or ctx.fallback_init_inputs
    if get_init_inputs is not None:
        try:
            init_inputs = list(get_init_inputs())
        except Exception as exc:
            raise CompileError("get_init_inputs() failed:\n" + user_traceback(exc)) from exc
    seed_everything(INIT_SEED)
    try:
        instance = cls(*init_inputs)
        if isinstance(instance, torch.nn.Module):
            instance = instance.to(ctx.device)
    except Exception as exc:
        raise CompileError(f"building {class_name} failed:\n" + user_traceback(exc)) from exc
    method_name = meta.method_name or "forward"
    if method_name == "forward" and isinstance(instance, torch.nn.Module):
        return instance  # through __call__, so module hooks run as in normal use
    method = getattr(instance, method_name, None)
    if not callable(method):
        raise CompileError(f"{class_name} has no method '{method_name}'")
    return method


class TorchKernel:
    def __init__(
        self, module: ModuleType, fn: Callable[..., Any], io: IOContract | None, device: str
    ) -> None:
        self.module = module
        self.fn = fn
        self.io = io
        self.device = device
        self.artifacts: dict[str, str] = {}

    def make_inputs(self, trial: int, salt: int = 0) -> Arguments:
        if self.io is not None:
            return Arguments.from_io(self.io, self.device, trial, salt)
        get_inputs = getattr(self.module, "get_inputs", None)
        if callable(get_inputs):
            seed_everything(trial_seed(INPUT_SEED, trial, salt))
            try:
                values = list(get_inputs())
            except Exception as exc:
                raise InputError("get_inputs() failed:\n" + user_traceback(exc)) from exc
            return Arguments([_to_device(v, self.device) for v in values])
        return Arguments(self._auto_inputs(trial, salt))

    def robustness_inputs(self, salt: int) -> list[Arguments] | None:
        """The other sizes the source declares for the robustness cases: its module-level
        ``get_robustness_inputs()``, a list of input lists, each as ``get_inputs()`` would
        return it for another size (drawn under a seed salted with ``salt``). None where it
        defines none, or an IOContract makes the inputs."""
        declared = getattr(self.module, "get_robustness_inputs", None)
        if self.io is not None or not callable(declared):
            return None
        seed_everything(trial_seed(INPUT_SEED, 0, salt))
        try:
            found = [list(values) for values in declared()]
        except Exception as exc:
            raise InputError("get_robustness_inputs() failed:\n" + user_traceback(exc)) from exc
        return [Arguments([_to_device(v, self.device) for v in values]) for values in found]

    def _auto_inputs(self, trial: int, salt: int) -> list[Any]:
        target = self.fn.forward if isinstance(self.fn, torch.nn.Module) else self.fn
        params = [
            p for p in inspect.signature(target).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            and p.default is inspect.Parameter.empty
        ]
        gen = torch.Generator().manual_seed(trial_seed(INPUT_SEED, trial, salt))
        return [
            torch.randn(AUTO_INPUT_SHAPE, generator=gen, device="cpu").to(self.device)
            for _ in params
        ]

    def run(self, args: Arguments) -> list[torch.Tensor]:
        with torch.no_grad():
            return call_python(self.fn, args)

    def prepared_outputs(self, result: Any, args: Arguments) -> list[torch.Tensor]:
        return returned_outputs(result, args)

    def prepare(self, args: Arguments) -> Callable[[], Any]:
        call = bind_call(self.fn, args)

        def timed() -> Any:
            with torch.no_grad():
                return call()

        return timed


def _to_device(value: Any, device: str) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    return value
