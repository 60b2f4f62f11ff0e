"""Compare output tensors and describe the first thing that differs well enough to fix it.

Rules: the number of outputs, then each output's shape and dtype must match exactly; values
match where ``|custom - ref| <= atol + rtol * |ref|``. NaN matches only NaN, an infinity only
the same infinity, so NaN/Inf in an output never passes where the reference has none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from validation.tolerances import tolerance_for

if TYPE_CHECKING:
    import torch


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def describe(t: torch.Tensor) -> str:
    return f"{dtype_name(t.dtype)}{list(t.shape)}"


def compare_outputs(
    custom: list[torch.Tensor],
    reference: list[torch.Tensor],
    atol: float | None = None,
    rtol: float | None = None,
) -> str | None:
    """None if ``custom`` matches ``reference``, else a message naming the first difference."""
    if len(custom) != len(reference):
        return (
            f"the kernel produced {len(custom)} output(s) but the reference produced "
            f"{len(reference)}: custom [{', '.join(map(describe, custom))}], "
            f"reference [{', '.join(map(describe, reference))}]"
        )
    for i, (got, want) in enumerate(zip(custom, reference)):
        problem = compare_tensor(got, want, atol, rtol)
        if problem is not None:
            label = f"output {i}" if len(reference) > 1 else "output"
            return f"{label}: {problem}"
    return None


def compare_tensor(
    got: torch.Tensor, want: torch.Tensor, atol: float | None, rtol: float | None
) -> str | None:
    import torch

    if tuple(got.shape) != tuple(want.shape):
        return f"shape mismatch: expected {list(want.shape)}, got {list(got.shape)}"
    if got.dtype != want.dtype:
        return f"dtype mismatch: expected {dtype_name(want.dtype)}, got {dtype_name(got.dtype)}"
    got = got.detach().to(want.device)
    want = want.detach()
    if want.numel() == 0:
        return None
    a_tol, r_tol = tolerance_for(dtype_name(want.dtype), atol, rtol)
    if want.dtype.is_floating_point or want.dtype.is_complex:
        g = got.to(torch.float64)
        w = want.to(torch.float64)
        diff = (g - w).abs()
        finite = torch.isfinite(w) & torch.isfinite(g)
        close = finite & (diff <= a_tol + r_tol * w.abs())
        both_nan = torch.isnan(g) & torch.isnan(w)
        same_inf = torch.isinf(w) & (g == w)
        bad = ~(close | both_nan | same_inf)
    else:
        g = got.to(torch.int64) if got.dtype != torch.bool else got
        w = want.to(torch.int64) if want.dtype != torch.bool else want
        diff = (g.to(torch.float64) - w.to(torch.float64)).abs()
        bad = g != w
    n_bad = int(bad.sum().item())
    if n_bad == 0:
        return None
    flat_bad = bad.flatten()
    finite_diff = torch.where(flat_bad & torch.isfinite(diff.flatten()), diff.flatten(), 0.0)
    worst = int(finite_diff.argmax().item())
    worst_abs = float(finite_diff[worst].item())
    ref_at_worst = float(want.flatten()[worst].to(torch.float64).abs().item())
    worst_rel = worst_abs / ref_at_worst if ref_at_worst > 0 else float("inf")
    first_flat = int(flat_bad.nonzero()[0].item())
    got_v = _scalar(got.flatten()[first_flat])
    want_v = _scalar(want.flatten()[first_flat])
    return (
        f"{n_bad} of {want.numel()} elements of {describe(want)} differ beyond "
        f"atol={a_tol:g}, rtol={r_tol:g}; max abs diff {worst_abs:.6g} at "
        f"{_index(worst, want.shape)} (rel {worst_rel:.3g}); first mismatch at {_index(first_flat, want.shape)}: "
        f"got {got_v}, expected {want_v}"
    )


def _index(flat: int, shape: tuple[int, ...] | torch.Size) -> list[int]:
    index = []
    for dim in reversed(tuple(shape)):
        index.append(flat % dim if dim else 0)
        flat //= dim if dim else 1
    return list(reversed(index))


def _scalar(t: torch.Tensor) -> float | int | bool:
    value = t.item()
    return round(value, 8) if isinstance(value, float) else value
