"""Default comparison tolerances per output dtype, overridable per request."""

from __future__ import annotations

# (atol, rtol), chosen by the reference output's dtype: tight enough to catch a dropped
# term, loose enough for a different but valid summation order. Integers compare exactly.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-7),
    # float32: a matmul of K=2048 computed by another (valid) algorithm differs by ~1.5e-4
    # near zero; 1e-3 passes such kernels, and the relative-norm check of
    # validation.compare still catches systematic errors above 1e-4.
    "float32": (1e-3, 1e-3),
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
    # float8 (compared as float32): one unit in the last place, whatever the value: rtol is
    # the largest unit relative to a normal value, atol the unit among the subnormals.
    # e4m3fn: 3 mantissa bits (a unit is at most 1/8 of a value); subnormals step by 2**-9.
    "float8_e4m3fn": (2**-9, 0.125),
    # e4m3fnuz: 3 mantissa bits; its exponent bias is one higher, subnormals step by 2**-10.
    "float8_e4m3fnuz": (2**-10, 0.125),
    # e5m2: 2 mantissa bits (a unit is at most 1/4 of a value); subnormals step by 2**-16.
    "float8_e5m2": (2**-16, 0.25),
    # e5m2fnuz: 2 mantissa bits; its exponent bias is one higher, subnormals step by 2**-17.
    "float8_e5m2fnuz": (2**-17, 0.25),
}
# A complex output (an FFT's) is held to what its parts' real dtype is, on the modulus of the
# difference.
COMPLEX_PARTS = {"complex64": "float32", "complex128": "float64"}


def as_real(dtype_name: str) -> str:
    """The dtype whose defaults an output of ``dtype_name`` takes: its own, or its parts'."""
    return COMPLEX_PARTS.get(dtype_name, dtype_name)


def tolerance_for(dtype_name: str, atol: float | None, rtol: float | None) -> tuple[float, float]:
    """The (atol, rtol) for an output of ``dtype_name`` ("float32", "int64", …)."""
    default_atol, default_rtol = DEFAULT_TOLERANCES.get(as_real(dtype_name), (0.0, 0.0))
    return (default_atol if atol is None else atol, default_rtol if rtol is None else rtol)
