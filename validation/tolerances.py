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
    # complex outputs (an FFT's) as their parts' real dtype: on the modulus of the difference
    "complex64": (1e-3, 1e-3),
    "complex128": (1e-7, 1e-7),
}


def tolerance_for(dtype_name: str, atol: float | None, rtol: float | None) -> tuple[float, float]:
    """The (atol, rtol) for an output of ``dtype_name`` ("float32", "int64", …)."""
    default_atol, default_rtol = DEFAULT_TOLERANCES.get(dtype_name, (0.0, 0.0))
    return (default_atol if atol is None else atol, default_rtol if rtol is None else rtol)
