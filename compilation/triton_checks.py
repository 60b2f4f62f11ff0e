"""Which Triton kernel of a source to launch, and static checks that it fits its IOContract.

Triton binds arguments without looking at what the kernel does with them: a number passed
where the body loads through a pointer, or a tensor where it multiplies, fails later in the
compiler with a message that does not name the argument. These checks run before the first
launch and name it. They only reject what is certainly wrong; anything they do not fully
understand is left for Triton to judge.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from kernel_eval_client.io_contract import ArgSpec, IOContract

from compilation.base import CompileError

# Keyword arguments Triton takes as compile options rather than kernel parameters.
LAUNCH_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion"})
_POINTER_CALLS = frozenset({
    "load", "store", "atomic_add", "atomic_max", "atomic_min", "atomic_and", "atomic_or",
    "atomic_xor", "atomic_xchg", "atomic_cas", "make_block_ptr", "make_tensor_descriptor",
})
_POINTER_KEYWORDS = ("pointer", "ptr", "base")
_PASS_THROUGH_CALLS = frozenset({"multiple_of", "max_contiguous", "max_constancy", "advance"})
_NUMBER_CALLS = frozenset({"range", "static_range", "arange", "cdiv"})
# Calls whose result may be a pointer made from something else (a cast, a select).
_OPAQUE_CALLS = frozenset({"where", "to", "cast", "bitcast", "int_to_ptr"})
_SCALAR_ANNOTATION = re.compile(
    r"^(int|float|bool|u?int(8|16|32|64)|[iu](1|8|16|32|64)|fp(16|32|64)|bf16|b?float(16|32|64))$"
)


@dataclass
class KernelParam:
    name: str
    is_constexpr: bool
    has_default: bool
    annotation: str


@dataclass
class TritonTarget:
    """The selected kernel, unwrapped from its autotune/heuristics decorators."""

    name: str
    launcher: Any  # what is indexed with [grid]: the outermost decorator
    fn: Callable[..., Any]  # the plain Python function
    params: list[KernelParam]
    autotuned: bool = False
    tuned: set[str] = field(default_factory=set)  # meta-params the autotune configs set
    heuristic: set[str] = field(default_factory=set)  # meta-params @triton.heuristics sets


def innermost(obj: Any) -> Any:
    while not inspect.isfunction(obj.fn):
        obj = obj.fn
    return obj


def select_kernel(module: ModuleType, kernel_name: str | None) -> TritonTarget:
    """The kernel ``kernel_name`` names, or the only entry kernel the source defines."""
    from triton.runtime.jit import KernelInterface

    kernels = {
        name: obj for name, obj in vars(module).items()
        if isinstance(obj, KernelInterface) and innermost(obj).fn.__module__ == module.__name__
    }
    if kernel_name is not None:
        if kernel_name not in kernels:
            defined = ", ".join(sorted(kernels)) or "none"
            raise CompileError(
                f"kernel_name '{kernel_name}' is not a Triton kernel in the source; "
                f"its @triton.jit kernels are: {defined}"
            )
        chosen = kernel_name
    else:
        called = set().union(*(_called_names(innermost(k).fn) for k in kernels.values()))
        entries = sorted(n for n in kernels if n not in called)  # helpers are called by kernels
        if not entries:
            raise CompileError("no @triton.jit kernel found in the source")
        if len(entries) > 1:
            raise CompileError(
                f"the source defines several Triton kernels ({', '.join(entries)}); "
                "say which one to launch with metadata.kernel_name"
            )
        chosen = entries[0]
    return _unwrap(chosen, kernels[chosen])


def _unwrap(name: str, launcher: Any) -> TritonTarget:
    from triton.runtime.autotuner import Autotuner, Heuristics

    target = TritonTarget(name, launcher, innermost(launcher).fn, [])
    obj = launcher
    while not inspect.isfunction(obj.fn):
        if isinstance(obj, Autotuner):
            target.autotuned = True
            target.tuned |= {k for config in obj.configs for k in config.kwargs}
        elif isinstance(obj, Heuristics):
            target.heuristic |= set(obj.values)
        obj = obj.fn
    for p in inspect.signature(target.fn).parameters.values():
        text = _annotation_text(p.annotation)
        target.params.append(
            KernelParam(p.name, "constexpr" in text, p.default is not p.empty, text)
        )
    return target


def _annotation_text(annotation: Any) -> str:
    if annotation is inspect.Parameter.empty:
        return ""
    if isinstance(annotation, str):
        return annotation
    if isinstance(annotation, type):
        return annotation.__name__
    return repr(annotation)


def _expected_kind(annotation: str) -> str | None:
    """'tensor' or 'scalar' when a parameter's annotation says which, else None."""
    text = annotation.replace(" ", "")
    if not text or "constexpr" in text:
        return None
    if text.startswith("*") or "pointer" in text:
        return "tensor"
    return "scalar" if _SCALAR_ANNOTATION.match(text.rsplit(".", 1)[-1]) else None


def check_contract(target: TritonTarget, io: IOContract) -> None:
    """Raise CompileError naming the argument if ``io`` cannot bind to the kernel's signature."""
    params = target.params
    positional = [a for a in io.args if not a.is_meta]
    meta = [a for a in io.args if a.is_meta]
    signature = ", ".join(p.name for p in params)
    if len(positional) > len(params):
        raise CompileError(
            f"kernel '{target.name}' takes {len(params)} parameters ({signature}) but the "
            f"IOContract passes {len(positional)} non-meta arguments "
            f"({', '.join(a.name for a in positional)})"
        )
    set_by_decorator = target.tuned | target.heuristic
    for position, (param, arg) in enumerate(zip(params, positional), start=1):
        where = f"IOContract argument '{arg.name}' (position {position})"
        if param.name in set_by_decorator:
            raise CompileError(f"{where} binds to '{param.name}', which "
                               f"{_setter(target, param.name)} sets; remove it from the IOContract")
        if param.is_constexpr and arg.type == "tensor":
            raise CompileError(f"kernel parameter '{param.name}' is a tl.constexpr but {where} "
                               "is a tensor")
        expected = _expected_kind(param.annotation)
        got = "tensor" if arg.type == "tensor" else "scalar"
        if expected is not None and expected != got:
            raise CompileError(f"kernel parameter '{param.name}: {param.annotation}' expects a "
                               f"{expected} but {where} is a {arg.type}")
    by_position = {p.name for p in params[: len(positional)]}
    names = {p.name for p in params}
    for arg in meta:
        if arg.name in by_position:
            raise CompileError(f"kernel parameter '{arg.name}' is given twice: by position and "
                               "as an is_meta argument")
        if arg.name in set_by_decorator:
            raise CompileError(f"is_meta argument '{arg.name}' is set by "
                               f"{_setter(target, arg.name)}; remove it from the IOContract")
        if target.autotuned and arg.name in LAUNCH_OPTIONS:
            raise CompileError(f"is_meta argument '{arg.name}' is chosen by @triton.autotune "
                               "for an autotuned kernel; remove it from the IOContract")
        if arg.name not in names and arg.name not in LAUNCH_OPTIONS:
            constexprs = ", ".join(p.name for p in params if p.is_constexpr) or "none"
            raise CompileError(f"is_meta argument '{arg.name}' is not a parameter of kernel "
                               f"'{target.name}' ({signature}); its constexpr parameters: "
                               f"{constexprs}")
    given = by_position | {a.name for a in meta} | set_by_decorator
    for param in params[len(positional):]:
        if param.name in given or param.has_default:
            continue
        if param.is_constexpr:
            raise CompileError(f"kernel '{target.name}' needs its tl.constexpr '{param.name}': "
                               "add it to the IOContract as an argument with is_meta: true")
        raise CompileError(f"kernel '{target.name}' takes {len(params)} parameters ({signature}) "
                           f"but the IOContract passes {len(positional)}: '{param.name}' "
                           "is missing")


def _setter(target: TritonTarget, name: str) -> str:
    return "@triton.autotune configs" if name in target.tuned else "@triton.heuristics"


# ---- static check of how the kernel body uses its parameters -------------------------------


def _function_ast(fn: Callable[..., Any]) -> tuple[ast.FunctionDef, int] | None:
    """The function's syntax tree and the line offset of its source, if its source is at hand."""
    try:
        lines, first = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return None
    node = tree.body[0] if tree.body else None
    return (node, first - 1) if isinstance(node, ast.FunctionDef) else None


def _called_names(fn: Callable[..., Any]) -> set[str]:
    parsed = _function_ast(fn)
    if parsed is None:
        return set()
    return {c.func.id for c in ast.walk(parsed[0]) if isinstance(c, ast.Call)
            and isinstance(c.func, ast.Name)}


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


class _Roots:
    """Which parameters a pointer expression may take its base address from.

    ``roots(e)`` is (names, complete): the parameters in additive position of ``e``
    (following local assignments), and whether every part of ``e`` was understood. Only a
    complete answer is used, so an unusual kernel is never rejected by mistake.
    """

    def __init__(self, fn: ast.FunctionDef, params: set[str]) -> None:
        self.params = params
        self.assigned: dict[str, list[ast.expr | None]] = {}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    self._bind(t, node.value)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
                value = (ast.BinOp(node.target, node.op, node.value)
                         if isinstance(node, ast.AugAssign) else node.value)
                self._bind(node.target, value)
            elif isinstance(node, ast.NamedExpr):
                self._bind(node.target, node.value)
            elif isinstance(node, ast.For):
                loops_over_range = (isinstance(node.iter, ast.Call)
                                    and _call_name(node.iter) in _NUMBER_CALLS)
                self._bind(node.target, ast.Constant(0) if loops_over_range else None)
        for node in ast.walk(fn):  # names bound any other way (with, comprehensions): unknown
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                self.assigned.setdefault(node.id, [None])

    def _bind(self, target: ast.expr, value: ast.expr | None) -> None:
        if isinstance(target, ast.Name):
            self.assigned.setdefault(target.id, []).append(value)
        else:  # tuple unpacking, subscripts: not followed
            for name in (n for n in ast.walk(target) if isinstance(n, ast.Name)):
                self.assigned.setdefault(name.id, []).append(None)

    def __call__(self, e: ast.expr, seen: frozenset[str] = frozenset()) -> tuple[set[str], bool]:
        if isinstance(e, ast.Name):
            if e.id not in self.params and e.id not in self.assigned:
                return set(), True  # a global: never a pointer in a Triton kernel
            names, complete = ({e.id} if e.id in self.params else set()), True
            for value in self.assigned.get(e.id, []) if e.id not in seen else []:
                if value is None:
                    complete = False
                    continue
                more, ok = self(value, seen | {e.id})
                names, complete = names | more, complete and ok
            return names, complete
        if isinstance(e, ast.BinOp):
            if isinstance(e.op, ast.Add):
                (a, ok_a), (b, ok_b) = self(e.left, seen), self(e.right, seen)
                return a | b, ok_a and ok_b
            return self(e.left, seen) if isinstance(e.op, ast.Sub) else (set(), True)
        if isinstance(e, (ast.Subscript, ast.Attribute)):
            return self(e.value, seen)
        if isinstance(e, ast.IfExp):
            (a, ok_a), (b, ok_b) = self(e.body, seen), self(e.orelse, seen)
            return a | b, ok_a and ok_b
        if isinstance(e, ast.Call):
            name = _call_name(e)
            if name in _PASS_THROUGH_CALLS and e.args:
                return self(e.args[0], seen)
            if isinstance(e.func, ast.Attribute) and name not in _OPAQUE_CALLS:
                return self(e.func.value, seen)  # tl.xxx(...), or a method such as x.reshape()
            return set(), False  # a helper or a cast may return a pointer
        return set(), isinstance(e, ast.Constant)


def check_argument_kinds(target: TritonTarget, io: IOContract) -> None:
    """Reject a tensor where the kernel body needs a number, or a number where it needs a pointer.

    Finds the parameters used as the pointer of ``tl.load``/``tl.store``/atomics and those
    used as numbers (``*``, ``//``, ``%``, ``range``, ``tl.arange``, comparisons), and checks
    the IOContract gives them a tensor, resp. a scalar. Triton would reject the same kernels
    later, with a message that does not name the argument.
    """
    parsed = _function_ast(target.fn)
    if parsed is None:
        return
    fn, offset = parsed
    bound: dict[str, ArgSpec] = dict(zip((p.name for p in target.params),
                                         (a for a in io.args if not a.is_meta)))
    bound.update({a.name: a for a in io.args if a.is_meta})
    tensors = {name for name, a in bound.items() if a.type == "tensor"}
    roots = _Roots(fn, {p.name for p in target.params})

    problems: dict[str, str] = {}  # one per parameter, in the order found

    def found(param: str, use: str, node: ast.AST) -> None:
        arg = bound[param]
        line = getattr(node, "lineno", 1) + offset
        problems.setdefault(param, f"kernel '{target.name}' uses parameter '{param}' as {use} "
                            f"(line {line}: {ast.unparse(node)}) but the IOContract passes "
                            f"{arg.type} argument '{arg.name}' there")

    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
            node.func.attr in _POINTER_CALLS
        ):
            pointer = next((k.value for k in node.keywords if k.arg in _POINTER_KEYWORDS),
                           node.args[0] if node.args else None)
            if pointer is None:
                continue
            names, complete = roots(pointer)
            if complete and names and all(n in bound and n not in tensors for n in names):
                found(min(names), "a pointer", node)
        operands: list[ast.expr] = []
        if isinstance(node, ast.BinOp) and isinstance(
            node.op, (ast.Mult, ast.FloorDiv, ast.Mod, ast.Div)
        ):
            operands = [node.left, node.right]
        elif isinstance(node, ast.Call) and _call_name(node) in _NUMBER_CALLS:
            operands = list(node.args)
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(
            node.ops[0], (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
        ):
            # Pointers may be compared with pointers: flag a side only if the other is a number.
            sides = [node.left, node.comparators[0]]
            for side, other in (sides, sides[::-1]):
                other_roots, complete = roots(other)
                if complete and not other_roots & tensors:
                    operands.append(side)
        for operand in operands:
            if isinstance(operand, ast.Name) and operand.id in tensors:
                found(operand.id, "a number", node)
    if problems:
        raise CompileError("\n".join(
            [*problems.values(), "check the order of the IOContract's args"]
        ))
