"""A small, safe evaluator for launch-dimension expressions such as ``cdiv(n, BLOCK_SIZE)``.

An IOContract may give a grid dimension as a string, so that autotuned Triton kernels can
size their grid from meta-parameters the tuner picks. The string comes from the user, so it
is parsed with :mod:`ast` and only this grammar is accepted::

    expr := int | name | expr (+ | - | * | // | %) expr | -expr | +expr | (expr)
          | cdiv(expr, expr) | min(expr, expr, ...) | max(expr, expr, ...)

Names are looked up in a mapping given at evaluation time; every value must be an int.
Nothing is ever passed to ``eval``.
"""

from __future__ import annotations

import ast
import numbers
from collections.abc import Callable, Mapping

__all__ = ["GridExpr", "GridExprError", "cdiv", "evaluate"]

MAX_EXPR_CHARS = 256
# Any launch dimension is far below this; the bound also keeps big-int arithmetic cheap.
_MAX_MAGNITUDE = 2**63


class GridExprError(ValueError):
    """The expression is not in the accepted grammar, or cannot be evaluated."""


def cdiv(a: int, b: int) -> int:
    """``a / b`` rounded up, as ``triton.cdiv``."""
    if b == 0:
        raise GridExprError("cdiv by zero")
    return -(-a // b)


def _min(*args: int) -> int:
    return min(args)


def _max(*args: int) -> int:
    return max(args)


# name -> (function, minimum argument count, maximum argument count or None)
_FUNCTIONS: dict[str, tuple[Callable[..., int], int, int | None]] = {
    "cdiv": (cdiv, 2, 2),
    "min": (_min, 2, None),
    "max": (_max, 2, None),
}

_BINOPS: dict[type[ast.operator], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.FloorDiv: "//",
    ast.Mod: "%",
}

_HINTS: dict[type[ast.operator], str] = {
    ast.Div: "'/' is true division; use '//' or cdiv(a, b)",
    ast.Pow: "'**' is not allowed",
}


class GridExpr:
    """A parsed, validated expression; call it with a mapping of names to ints.

    >>> GridExpr("cdiv(n, BLOCK)")({"n": 1000, "BLOCK": 256})
    4
    """

    def __init__(self, text: str) -> None:
        if not isinstance(text, str):
            raise GridExprError(f"a grid expression must be a string, got {type(text).__name__}")
        self.text = text.strip()
        if not self.text:
            raise GridExprError("empty grid expression")
        if len(self.text) > MAX_EXPR_CHARS:
            raise GridExprError(f"grid expression longer than {MAX_EXPR_CHARS} characters")
        try:
            tree = ast.parse(self.text, mode="eval")
        except SyntaxError as exc:
            raise GridExprError(f"grid expression {self.text!r} is not valid: {exc.msg}") from exc
        self._body = tree.body
        names: set[str] = set()
        self._check(self._body, names)
        self.names: frozenset[str] = frozenset(names)

    def __repr__(self) -> str:
        return f"GridExpr({self.text!r})"

    def __call__(self, names: Mapping[str, object]) -> int:
        return self._eval(self._body, names)

    # ---- validation: done once, so a bad expression fails at compile time -------------------

    def _fail(self, why: str) -> GridExprError:
        return GridExprError(f"grid expression {self.text!r}: {why}")

    def _check(self, node: ast.expr, names: set[str]) -> None:
        if isinstance(node, ast.Constant):
            if type(node.value) is not int:
                raise self._fail(f"only integer constants are allowed, not {node.value!r}")
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.BinOp):
            if type(node.op) not in _BINOPS:
                hint = _HINTS.get(type(node.op), "only + - * // % are allowed")
                raise self._fail(hint)
            self._check(node.left, names)
            self._check(node.right, names)
        elif isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, (ast.USub, ast.UAdd)):
                raise self._fail("only unary minus and plus are allowed")
            self._check(node.operand, names)
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
                what = ast.unparse(node.func)
                raise self._fail(f"calling {what!r} is not allowed; only cdiv, min and max are")
            if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
                raise self._fail(f"{node.func.id}() takes plain positional arguments only")
            _, least, most = _FUNCTIONS[node.func.id]
            if len(node.args) < least or (most is not None and len(node.args) > most):
                count = f"{least}" if most == least else f"at least {least}"
                raise self._fail(f"{node.func.id}() takes {count} arguments, got {len(node.args)}")
            for arg in node.args:
                self._check(arg, names)
        elif isinstance(node, ast.Attribute):
            raise self._fail(f"attribute access ({ast.unparse(node)}) is not allowed")
        elif isinstance(node, ast.Subscript):
            raise self._fail(f"indexing ({ast.unparse(node)}) is not allowed")
        else:
            raise self._fail(f"{type(node).__name__} is not allowed; use integers, names, "
                             "+ - * // %, cdiv, min and max")

    # ---- evaluation ---------------------------------------------------------------------------

    def _eval(self, node: ast.expr, names: Mapping[str, object]) -> int:
        if isinstance(node, ast.Constant):
            assert type(node.value) is int  # checked at parse time
            return self._bounded(node.value)
        if isinstance(node, ast.Name):
            if node.id not in names:
                known = ", ".join(sorted(k for k, v in names.items() if _is_int(v))) or "none"
                raise self._fail(f"unknown name {node.id!r}; integer names available: {known}")
            value = names[node.id]
            if not _is_int(value):
                raise self._fail(f"{node.id!r} is a {type(value).__name__}, not an integer")
            return self._bounded(int(value))  # type: ignore[call-overload]
        if isinstance(node, ast.UnaryOp):
            operand = self._eval(node.operand, names)
            return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.BinOp):
            left = self._eval(node.left, names)
            right = self._eval(node.right, names)
            op = type(node.op)
            if op in (ast.FloorDiv, ast.Mod) and right == 0:
                raise self._fail("division by zero")
            if op is ast.Add:
                return self._bounded(left + right)
            if op is ast.Sub:
                return self._bounded(left - right)
            if op is ast.Mult:
                return self._bounded(left * right)
            if op is ast.FloorDiv:
                return left // right
            return left % right
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        fn = _FUNCTIONS[node.func.id][0]
        args = [self._eval(a, names) for a in node.args]
        try:
            return fn(*args)
        except GridExprError as exc:
            raise self._fail(str(exc)) from None

    def _bounded(self, value: int) -> int:
        if abs(value) >= _MAX_MAGNITUDE:
            raise self._fail("value out of range")
        return value


def _is_int(value: object) -> bool:
    # numpy integers count; bools are accepted as 0/1, as Triton treats them.
    return isinstance(value, numbers.Integral)


def evaluate(text: str, names: Mapping[str, object]) -> int:
    """Parse and evaluate ``text`` once (see :class:`GridExpr`)."""
    return GridExpr(text)(names)
