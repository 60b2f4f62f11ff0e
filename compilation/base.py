"""The one interface every compilation backend implements, and the steps they share.

A backend turns a :class:`KernelCode` into an :class:`ExecutableKernel`: something that can
make its own inputs for a trial and run once on given arguments, returning the outputs to
compare. Compilation problems are raised as :class:`CompileError` (a verdict about the
kernel, shown to the user as ``compilation_error``); anything raised while running is a
runtime error of the kernel.

Exceptions::

    KernelError            a problem with the submitted kernel, reported to the user
    ├── CompileError       did not compile / import / fit its IOContract
    └── InputError         its inputs could not be built or shared with the reference
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from kernel_eval_client.io_contract import ArgSpec, IOContract

from shared.models import KernelCode

if TYPE_CHECKING:
    import torch


class KernelError(Exception):
    """A problem with the submitted kernel; its message is shown to the user."""


class CompileError(KernelError):
    """The kernel did not compile, import, or fit its IOContract."""


class InputError(KernelError):
    """The kernel's inputs could not be built, or do not match the reference's."""


@dataclass(frozen=True)
class CompileContext:
    device: str  # "cuda" or "cpu"
    work_dir: Path  # this job's scratch directory
    cache_dir: Path  # shared content-addressed build cache
    role: str = "kernel"  # "ref", "custom" or "kernel": names module files apart
    # For a custom model without get_init_inputs(): the reference's (KernelBench convention).
    fallback_init_inputs: Callable[[], Any] | None = None


@dataclass
class Arguments:
    """One call's arguments: values in call order, with their specs when an IOContract made them."""

    values: list[Any]
    specs: list[ArgSpec] | None = None

    @classmethod
    def from_io(cls, io: IOContract, device: str, trial: int = 0, salt: int = 0) -> Arguments:
        """Every argument of ``io`` for correctness trial ``trial`` (seeds salted with
        ``salt``), on ``device``."""
        from io_contract.tensor_utils import build_call_args

        return cls(build_call_args(io, device, trial=trial, salt=salt), list(io.args))

    def input_tensors(self) -> list[torch.Tensor]:
        """The tensors the kernel reads (inputs and inouts; every tensor without specs)."""
        import torch

        if self.specs is None:
            return [v for v in self.values if isinstance(v, torch.Tensor)]
        return [
            v for v, s in zip(self.values, self.specs)
            if s.type == "tensor" and s.role in ("input", "inout")
        ]

    def output_tensors(self) -> list[torch.Tensor]:
        if self.specs is None:
            return []
        return [
            v for v, s in zip(self.values, self.specs)
            if s.type == "tensor" and s.role in ("output", "inout")
        ]

    def clone(self) -> Arguments:
        import torch

        values = [v.clone() if isinstance(v, torch.Tensor) else v for v in self.values]
        return Arguments(values, self.specs)


class ExecutableKernel(Protocol):
    """A compiled kernel, ready to run."""

    io: IOContract | None
    artifacts: dict[str, str]  # e.g. PTX/SASS text, returned on request

    def make_inputs(self, trial: int, salt: int = 0) -> Arguments:
        """This kernel's own arguments for correctness trial ``trial`` (fresh data per trial;
        ``salt`` mixed into every seed: 0 for the request's own seeds)."""
        ...

    def run(self, args: Arguments) -> list[torch.Tensor]:
        """Run once and return the outputs to compare, in order."""
        ...

    def prepare(self, args: Arguments) -> Callable[[], Any]:
        """The bare call to time, with argument handling done once up front."""
        ...

    def prepared_outputs(self, result: Any, args: Arguments) -> list[torch.Tensor]:
        """What to compare of a prepared call on ``args`` that returned ``result``."""
        ...


class KernelBackend(Protocol):
    def compile(self, kernel: KernelCode, ctx: CompileContext) -> ExecutableKernel: ...


# ---- shared steps --------------------------------------------------------------------------


def load_module(source: str, ctx: CompileContext, preset: dict[str, Any] | None = None) -> ModuleType:
    """Import ``source`` as a real module file (Triton and tracebacks need a file on disk).

    ``preset`` names (e.g. ``torch``, ``nn``) are bound before the code runs, so KernelBench
    sources that use them without importing still work. Errors become :class:`CompileError`
    carrying the traceback's frames inside the user's file.
    """
    ctx.work_dir.mkdir(parents=True, exist_ok=True)
    name = f"kernel_{ctx.role}_{ctx.work_dir.name.replace('-', '_')}"
    path = ctx.work_dir / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    module.__dict__.update(preset or {})
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        raise CompileError(
            f"SyntaxError at line {exc.lineno}: {exc.msg}\n    {(exc.text or '').rstrip()}"
        ) from exc
    except BaseException as exc:
        sys.modules.pop(name, None)
        raise CompileError(user_traceback(exc, path)) from exc
    return module


def user_traceback(exc: BaseException, path: Path | None = None) -> str:
    """The exception with the traceback frames that matter: those in the user's code.

    Frames of the harness are dropped; if no frame is the user's, only the error is shown.
    """
    frames = traceback.extract_tb(exc.__traceback__)
    if path is not None:
        mine = [f for f in frames if f.filename == str(path)]
    else:
        mine = [f for f in frames if Path(f.filename).name.startswith("kernel_")]
    error = "".join(traceback.format_exception_only(type(exc), exc)).rstrip()
    if not mine:
        return error
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(mine[-8:]), error]
    return "".join(lines)


def find_callable(module: ModuleType, name: str, what: str) -> Callable[..., Any]:
    """``module.name``, or a CompileError listing what the source does define."""
    obj = getattr(module, name, None)
    if callable(obj):
        return obj
    defined = sorted(
        n for n, v in vars(module).items()
        if callable(v) and not n.startswith("_") and getattr(v, "__module__", None) == module.__name__
    )
    raise CompileError(
        f"{what} '{name}' is not defined in the source; it defines: "
        f"{', '.join(defined) if defined else 'no functions or classes'}"
    )


def call_python(fn: Callable[..., Any], args: Arguments) -> list[torch.Tensor]:
    """Call a Python kernel and return what to compare.

    With an IOContract, parameters are bound by name to the arguments of the same name
    (arguments the function does not name are left out, so one contract can serve a Triton
    kernel and its torch reference); if no parameter name matches, the non-meta input and
    inout arguments are passed in order. What the call returns is the output; if it returns
    None, the output and inout tensors it was given are.
    """
    return returned_outputs(bind_call(fn, args)(), args)


def returned_outputs(result: Any, args: Arguments) -> list[torch.Tensor]:
    """What to compare of a Python kernel's call on ``args`` that returned ``result``."""
    if result is None and args.specs is not None:
        return args.output_tensors()
    return to_tensor_list(result)


def bind_call(fn: Callable[..., Any], args: Arguments) -> Callable[[], Any]:
    """``fn`` with ``args`` bound (see :func:`call_python`), so a timed call does no binding."""
    if args.specs is None:
        values = list(args.values)
        return lambda: fn(*values)
    positional, keyword = bind_by_name(fn, args)
    return lambda: fn(*positional, **keyword)


def bind_by_name(fn: Callable[..., Any], args: Arguments) -> tuple[list[Any], dict[str, Any]]:
    assert args.specs is not None
    by_name = {s.name: v for s, v in zip(args.specs, args.values)}
    # An nn.Module is called through __call__(*args, **kwargs); its forward has the names.
    target = getattr(fn, "forward") if callable(getattr(fn, "forward", None)) else fn  # noqa: B009
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        params = []
    named = [
        p for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    if any(p.name in by_name for p in named):
        missing = [
            p.name for p in named if p.name not in by_name and p.default is inspect.Parameter.empty
        ]
        if missing:
            raise InputError(
                f"{getattr(fn, '__qualname__', fn)}() needs parameter(s) {', '.join(missing)} "
                f"that the IOContract does not define; it defines: {', '.join(by_name)}"
            )
        positional = [by_name[p.name] for p in named if p.kind == p.POSITIONAL_ONLY]
        keyword = {
            p.name: by_name[p.name] for p in named
            if p.kind != p.POSITIONAL_ONLY and p.name in by_name
        }
        return positional, keyword
    values = [
        v for s, v in zip(args.specs, args.values)
        if not s.is_meta and s.role in ("input", "inout")
    ]
    return values, {}


def to_tensor_list(result: Any) -> list[torch.Tensor]:
    """A kernel's return value as a flat list of tensors (scalars become 0-d tensors)."""
    import torch

    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (list, tuple)):
        out: list[torch.Tensor] = []
        for item in result:
            out.extend(to_tensor_list(item))
        return out
    if isinstance(result, (int, float, bool)):
        return [torch.tensor(result)]
    if result is None:
        return []
    raise TypeError(f"kernel returned a {type(result).__name__}, expected tensors")


def share_inputs(own: Arguments, ref: Arguments, copy: bool = True) -> Arguments:
    """``own`` arguments whose input tensors are replaced, in order, by the reference's.

    Both kernels of a comparison must see identical inputs. A custom kernel with its own
    IOContract keeps its scalars and output buffers; each of its input/inout tensors takes
    a copy of the reference's input tensor at the same position.
    """
    ref_inputs = ref.input_tensors()
    if own.specs is None:
        return ref.clone() if copy else ref
    slots = [
        i for i, s in enumerate(own.specs) if s.type == "tensor" and s.role in ("input", "inout")
    ]
    if len(slots) != len(ref_inputs):
        names = [own.specs[i].name for i in slots]
        raise InputError(
            f"the custom kernel's IOContract has {len(slots)} input tensor(s) ({', '.join(names)}) "
            f"but the reference takes {len(ref_inputs)}; a comparison needs the same inputs"
        )
    values = list(own.values)
    for i, ref_tensor in zip(slots, ref_inputs):
        mine = values[i]
        spec = own.specs[i]
        if tuple(mine.shape) != tuple(ref_tensor.shape) or mine.dtype != ref_tensor.dtype:
            raise InputError(
                f"input '{spec.name}' is {mine.dtype}{list(mine.shape)} in the custom kernel's "
                f"IOContract but the reference's input at that position is "
                f"{ref_tensor.dtype}{list(ref_tensor.shape)}"
            )
        values[i] = ref_tensor.clone() if copy else ref_tensor
    return Arguments(values, own.specs)

