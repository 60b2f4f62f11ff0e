"""The launch-dimension expression evaluator: what it computes, and what it refuses."""

from __future__ import annotations

import pytest

from compilation.grid_expr import GridExpr, GridExprError, cdiv, evaluate


@pytest.mark.parametrize(
    ("text", "names", "expected"),
    [
        ("4", {}, 4),
        ("cdiv(n, BLOCK)", {"n": 1000, "BLOCK": 256}, 4),
        ("cdiv(n, BLOCK)", {"n": 1024, "BLOCK": 256}, 4),
        ("(M + 15) // 16 * cdiv(N, 32)", {"M": 33, "N": 64}, 6),
        ("max(1, n % 7) - -2", {"n": 14}, 3),
        ("min(a, b, 3)", {"a": 5, "b": 4}, 3),
        ("+n", {"n": 9}, 9),
        ("n * 2", {"n": True}, 2),  # bools are 0/1, as Triton treats them
    ],
)
def test_evaluates(text: str, names: dict[str, int], expected: int) -> None:
    assert evaluate(text, names) == expected


def test_cdiv_rounds_up() -> None:
    assert [cdiv(n, 4) for n in (0, 1, 4, 5, 8)] == [0, 1, 1, 2, 2]


def test_names_are_collected_at_parse_time() -> None:
    assert GridExpr("cdiv(n_elements, BLOCK_SIZE) * y").names == {"n_elements", "BLOCK_SIZE", "y"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x.shape", "attribute access"),
        ("n.__class__", "attribute access"),
        ("foo(1)", "calling 'foo' is not allowed"),
        ("os.system('ls')", "calling 'os.system' is not allowed"),
        ("__import__('os')", "calling '__import__' is not allowed"),
        ("eval('1')", "calling 'eval' is not allowed"),
        ("(lambda: 1)()", "calling"),
        ("a[0]", "indexing"),
        ("n / 2", "true division"),
        ("2 ** 64", "'\\*\\*' is not allowed"),
        ("1.5", "integer constants"),
        ("'abc'", "integer constants"),
        ("True", "integer constants"),
        ("n if n else 1", "IfExp is not allowed"),
        ("n < 3", "Compare is not allowed"),
        ("[n for n in ()]", "ListComp is not allowed"),
        ("cdiv(1)", "takes 2 arguments"),
        ("max(n)", "at least 2"),
        ("min(*a)", "plain positional"),
        ("n; 1", "not valid"),
        ("import os", "not valid"),
        ("", "empty"),
        ("1" * 300, "longer than"),
    ],
)
def test_refuses_anything_outside_the_grammar(text: str, message: str) -> None:
    with pytest.raises(GridExprError, match=message):
        GridExpr(text)


def test_unknown_name_lists_the_integer_names() -> None:
    with pytest.raises(GridExprError, match="unknown name 'B'.*available: N, n"):
        evaluate("cdiv(n, B)", {"n": 1, "N": 2, "x": object()})


def test_non_integer_value_is_refused() -> None:
    with pytest.raises(GridExprError, match="'x' is a float"):
        evaluate("x + 1", {"x": 1.5})


@pytest.mark.parametrize("text", ["n // 0", "n % 0", "cdiv(n, 0)"])
def test_division_by_zero(text: str) -> None:
    with pytest.raises(GridExprError, match="by zero"):
        evaluate(text, {"n": 8})


def test_huge_values_are_refused() -> None:
    with pytest.raises(GridExprError, match="out of range"):
        evaluate("n * n * n", {"n": 2**40})
