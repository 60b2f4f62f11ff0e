"""Small pure helpers of the in-process timer's figures, shared by :mod:`harness.timer` and
its device checks (:mod:`harness.device_checks`): a median, a count clamped to a range, and an
exception in one line for a figure's reason."""

from __future__ import annotations


def median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return 0.0
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def clamp(value: float, low: int, high: int) -> int:
    return max(low, min(high, int(value)))


def describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
