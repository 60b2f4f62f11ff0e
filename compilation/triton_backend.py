"""Triton kernels: one or more ``@triton.jit`` functions, launched as the IOContract says.

Launch: the IOContract's arguments that are not ``is_meta`` go positionally, in order; the
``is_meta`` ones go as keyword constexprs; the grid is ``launch.grid`` (x, y, z, default 1),
and ``num_warps``/``num_stages`` are passed when given (not to autotuned kernels: the tuner
owns them). A grid dimension may be an expression over integer arguments and
meta-parameters, e.g. ``"cdiv(n_elements, BLOCK_SIZE)"``, evaluated by
:mod:`compilation.grid_expr` once the tuner has picked its config.

Triton compiles at first launch. So that a kernel that does not compile is reported as a
compile error with its line number, ``compile()`` compiles it for real inputs: on a GPU
with ``warmup`` (compile, no launch); under the CPU interpreter (``TRITON_INTERPRET=1``,
set by the worker before Triton is imported) by one launch on throwaway inputs, since the
interpreter finds errors only by running.
"""

from __future__ import annotations

import contextlib
import inspect
import numbers
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from kernel_eval_client.io_contract import Dim3, IOContract

from compilation.base import (
    Arguments,
    CompileContext,
    CompileError,
    load_module,
    user_traceback,
)
from compilation.grid_expr import GridExpr, GridExprError
from compilation.triton_checks import (
    TritonTarget,
    check_argument_kinds,
    check_contract,
    innermost,
    select_kernel,
)
from shared.models import KernelCode


def _import_triton() -> Any:
    try:
        import triton
    except ImportError as exc:
        raise CompileError("Triton is not installed on this server (pip install triton)") from exc
    return triton


class TritonBackend:
    def compile(self, kernel: KernelCode, ctx: CompileContext) -> TritonKernel:
        if kernel.io is None:
            raise CompileError(
                "triton kernels need an IOContract: its args are the kernel's arguments in "
                "order (is_meta for tl.constexpr ones) and its launch gives the grid"
            )
        _import_triton()
        module = load_module(kernel.source_code, ctx, _preset())
        target = select_kernel(module, kernel.meta().kernel_name)
        if ctx.device == "cpu" and type(innermost(target.launcher)).__name__ == "JITFunction":
            raise CompileError(
                "this server runs in CPU mode, where Triton kernels run in Triton's interpreter, "
                "but TRITON_INTERPRET=1 was not set before triton was imported"
            )
        check_contract(target, kernel.io)
        check_argument_kinds(target, kernel.io)
        built = TritonKernel(module, target, kernel.io, ctx.device)
        built.compile_now(return_artifacts=bool(kernel.meta().return_artifacts))
        return built


def _preset() -> dict[str, Any]:
    import triton
    import triton.language as tl

    return {"torch": torch, "triton": triton, "tl": tl}


# ---- the executable kernel ------------------------------------------------------------------


class TritonKernel:
    def __init__(
        self, module: ModuleType, target: TritonTarget, io: IOContract, device: str
    ) -> None:
        self.module = module
        self.target = target
        self.io = io
        self.device = device
        self.artifacts: dict[str, str] = {}
        launch = io.launch
        self.grid = make_grid(launch.grid if launch else None, target, io)
        self.options: dict[str, int] = {}
        if launch is not None and not target.autotuned:
            if launch.num_warps is not None:
                self.options["num_warps"] = launch.num_warps
            if launch.num_stages is not None:
                self.options["num_stages"] = launch.num_stages

    def make_inputs(self, trial: int, salt: int = 0) -> Arguments:
        return Arguments.from_io(self.io, self.device, trial, salt)

    def compile_now(self, return_artifacts: bool = False) -> None:
        """Compile now, so compile errors are reported as such (see the module docstring)."""
        from triton.runtime.autotuner import Autotuner

        positional, meta = _split(self.make_inputs(0))
        if self.device == "cpu":
            obj = self.target.launcher
            while not inspect.isfunction(obj):
                if isinstance(obj, Autotuner):
                    # Without a GPU there is no benchmarker; the interpreter's timings would
                    # mean nothing anyway, so each config just runs once.
                    obj.__dict__["do_bench"] = _run_once
                obj = obj.fn
            try:
                self.target.launcher[self.grid](*positional, **meta, **self.options)
            except Exception as exc:  # whatever the interpreter hits, a compiler would reject
                raise CompileError(self._interpreter_message(exc)) from exc
            return
        try:
            compiled = self.target.launcher.warmup(
                *positional, grid=self.grid, **meta, **self.options
            )
        except Exception as exc:  # binder, front-end and ptxas errors alike
            raise CompileError(compile_error_message(exc, self.target.name, self.module)) from exc
        kernels = [k for k in (compiled if isinstance(compiled, list) else [compiled]) if k]
        if return_artifacts and kernels:  # one text per autotune config
            self.artifacts["ptx"] = "\n".join(k.asm["ptx"] for k in kernels)
            with contextlib.suppress(Exception):  # SASS needs a disassembler, which may be absent
                self.artifacts["sass"] = "\n".join(k.asm["sass"] for k in kernels)

    def run(self, args: Arguments) -> list[torch.Tensor]:
        from triton.compiler.errors import CompilationError
        from triton.runtime.errors import PTXASError

        try:
            self.prepare(args)()
        except (CompilationError, PTXASError) as exc:  # a new specialisation compiled here
            raise CompileError(compile_error_message(exc, self.target.name, self.module)) from exc
        return args.output_tensors()

    def prepared_outputs(self, result: Any, args: Arguments) -> list[torch.Tensor]:
        return args.output_tensors()  # a launch writes its output arguments

    def prepare(self, args: Arguments) -> Callable[[], Any]:
        """The bare launch on ``args``, for timing."""
        positional, meta = _split(args)
        launch = self.target.launcher[self.grid]
        keywords = {**meta, **self.options}
        return lambda: launch(*positional, **keywords)

    def _interpreter_message(self, exc: BaseException) -> str:
        # The interpreter wraps the error once per nested @jit call; each link's traceback
        # holds one level of the user's call stack.
        path = str(self.module.__file__)
        frames: list[traceback.FrameSummary] = []
        innermost = exc
        while True:
            frames += [f for f in traceback.extract_tb(innermost.__traceback__)
                       if f.filename == path]
            if innermost.__cause__ is None:
                break
            innermost = innermost.__cause__
        if not frames:
            return f"Triton (interpreter) error in kernel '{self.target.name}':\n" + \
                user_traceback(innermost)
        return "".join(
            [(f"Triton (interpreter) error in kernel '{self.target.name}' at line "
              f"{frames[-1].lineno}:\nTraceback (most recent call last):\n")]
            + traceback.format_list(frames[-8:])
            + traceback.format_exception_only(type(innermost), innermost)
        ).rstrip()


def _split(args: Arguments) -> tuple[list[Any], dict[str, Any]]:
    if args.specs is None:
        return list(args.values), {}
    positional = [v for v, s in zip(args.values, args.specs) if not s.is_meta]
    meta = {s.name: v for v, s in zip(args.values, args.specs) if s.is_meta}
    return positional, meta


def _run_once(kernel_call: Callable[[], Any], quantiles: Any = None) -> list[float]:
    started = time.perf_counter()
    kernel_call()
    elapsed = (time.perf_counter() - started) * 1e3
    return [elapsed] * (len(quantiles) if quantiles else 1)


def make_grid(
    dims: Dim3 | None, target: TritonTarget, io: IOContract
) -> tuple[int, ...] | Callable[[dict[str, Any]], tuple[int, ...]]:
    """An int tuple, or for expression dims a ``grid(meta)`` callable as Triton accepts."""
    values: list[int | str] = [dims.x, dims.y, dims.z] if dims else [1, 1, 1]
    if all(isinstance(v, int) for v in values):
        return tuple(int(v) for v in values)
    # Names an expression may use: the kernel's integer arguments by IOContract name and by
    # parameter name, and the meta-parameters the tuner or heuristics pick.
    fixed: dict[str, Any] = {}
    positional = [a for a in io.args if not a.is_meta]
    for param, arg in zip(target.params, positional):
        if arg.type != "tensor":
            fixed[param.name] = arg.value
    fixed.update({a.name: a.value for a in io.args if a.type != "tensor"})
    known = set(fixed) | target.tuned | target.heuristic | {
        p.name for p in target.params if p.has_default
    }
    exprs: list[GridExpr | int] = []
    for value in values:
        if isinstance(value, int):
            exprs.append(value)
            continue
        try:
            expr = GridExpr(value)
        except GridExprError as exc:
            raise CompileError(f"launch.grid: {exc}") from exc
        unknown = sorted(expr.names - known)
        if unknown:
            raise CompileError(
                f"launch.grid expression {value!r} uses {', '.join(map(repr, unknown))}, which "
                f"is not an integer argument or meta-parameter; available: "
                f"{', '.join(sorted(known)) or 'none'}"
            )
        exprs.append(expr)

    def grid(meta: dict[str, Any]) -> tuple[int, ...]:
        # Under the interpreter non-constexpr ints arrive wrapped, so those come from `fixed`.
        names = {**fixed, **{k: v for k, v in meta.items() if isinstance(v, numbers.Integral)}}
        out = tuple(e if isinstance(e, int) else e(names) for e in exprs)
        if any(d < 0 for d in out):
            raise GridExprError(f"launch.grid evaluated to {out}; dimensions must be >= 0")
        return out

    return grid


def _def_line(fn: Any, source: list[str]) -> int:
    """The file line of ``fn``'s ``def``: Triton numbers a kernel's lines from there.

    Newer Triton records it (``def_file_line_number``); older Triton only has the line of the
    first decorator (``starting_line_number``), so walk from there to the ``def``.
    """
    line = getattr(fn, "def_file_line_number", None)
    if line is not None:
        return int(line)
    line = int(fn.starting_line_number)
    while 0 < line <= len(source) and not source[line - 1].lstrip().startswith(("def ", "async def ")):
        line += 1
    return line if line <= len(source) else int(fn.starting_line_number)


def compile_error_message(exc: BaseException, kernel_name: str, module: ModuleType) -> str:
    """Triton's compile error as a message with line numbers of the submitted source."""
    from triton.compiler.errors import CompilationError
    from triton.runtime.jit import JITCallable, KernelInterface

    chain: list[CompilationError] = []
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, CompilationError):
            chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    if not chain:
        return f"Triton could not compile kernel '{kernel_name}': {type(exc).__name__}: {exc}"
    functions: dict[str, Any] = {}
    for obj in vars(module).values():
        while obj is not None and not isinstance(obj, JITCallable):
            obj = getattr(obj, "fn", None) if isinstance(obj, KernelInterface) else None
        if obj is not None:
            functions[obj.src] = obj
    source = Path(module.__file__ or "").read_text().splitlines() if module.__file__ else []
    parts: list[str] = []
    for depth, err in enumerate(reversed(chain)):  # the innermost error first
        fn = functions.get(err.src or "")
        lineno = getattr(err.node, "lineno", None)
        if fn is None or lineno is None:
            parts.append(str(err))
            continue
        line = _def_line(fn, source) + lineno - 1
        col = getattr(err.node, "col_offset", 0)
        if depth == 0:
            text = source[line - 1] if 0 < line <= len(source) else ""
            message = err.error_message or (repr(err.__cause__) if err.__cause__ else "")
            indent = len(text) - len(text.lstrip())
            parts.append(f"Triton compile error in '{fn.__name__}' at line {line}, column "
                         f"{col + 1}:\n    {text.strip()}\n    {' ' * (col - indent)}^\n{message}")
        else:
            parts.append(f"  called from line {line} in '{fn.__name__}'")
    return "\n".join(parts)
