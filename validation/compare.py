"""Compare output tensors and describe the first thing that differs well enough to fix it.

Rules: the number of outputs, then each output's shape and dtype must match exactly; values
match where ``|custom - ref| <= atol + rtol * |ref|``. NaN matches only NaN, an infinity only
the same infinity, so NaN/Inf in an output never passes where the reference has none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from validation.tolerances import as_real, tolerance_for

if TYPE_CHECKING:
    import torch

    from harness.tensors import Staged


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
    from harness.tensors import resolve

    return resolve(stage_outputs(custom, reference, atol, rtol))[0]


def stage_outputs(
    custom: list[torch.Tensor], reference: list[torch.Tensor], atol: float | None,
    rtol: float | None,
) -> Staged[str | None]:
    """:func:`compare_outputs`, staged: every output's sums read back with whatever else is
    resolved beside them (:func:`harness.tensors.resolve`)."""
    from harness.tensors import Staged, first_of

    if len(custom) != len(reference):
        return Staged.known(
            f"the kernel produced {len(custom)} output(s) but the reference produced "
            f"{len(reference)}: custom [{', '.join(map(describe, custom))}], "
            f"reference [{', '.join(map(describe, reference))}]"
        )
    return first_of([(f"output {i}: " if len(reference) > 1 else "output: ",
                      stage_tensor(got, want, atol, rtol))
                     for i, (got, want) in enumerate(zip(custom, reference))])


# The largest ||got - want|| / ||want|| an output of each dtype may have (default tolerances
# only): a few units of the dtype's rounding (float16, bfloat16), or what a different
# summation order or fast-math functions give (float32, float64). float8: its rtol, one unit:
# an error within rtol everywhere stays below it, so only values let through by atol exceed it.
REL_NORM_LIMITS = {"float64": 1e-7, "float32": 1e-4, "float16": 4e-3, "bfloat16": 3e-2,
                   "float8_e4m3fn": 0.125, "float8_e4m3fnuz": 0.125, "float8_e5m2": 0.25,
                   "float8_e5m2fnuz": 0.25}
CHUNK = 1 << 24  # elements compared at once: bounded extra memory for multi-GB outputs


def compare_tensor(
    got: torch.Tensor, want: torch.Tensor, atol: float | None, rtol: float | None,
    norm_slack: float = 1.0,
) -> str | None:
    """None if ``got`` matches ``want``, else what differs. ``norm_slack`` widens the
    relative-norm limit (a sample of an output's elements estimates its norm less surely)."""
    from harness.tensors import resolve

    return resolve(stage_tensor(got, want, atol, rtol, norm_slack))[0]


def stage_tensor(
    got: torch.Tensor, want: torch.Tensor, atol: float | None, rtol: float | None,
    norm_slack: float = 1.0, atol_scale: float = 1.0,
) -> Staged[str | None]:
    """:func:`compare_tensor`, staged (for :func:`harness.tensors.resolve`). ``atol_scale``
    multiplies the absolute tolerance, the request's or the dtype's (an output whose inputs
    were scaled: :mod:`validation.robustness`)."""
    import torch

    from harness.tensors import Staged

    if tuple(got.shape) != tuple(want.shape):
        return Staged.known(f"shape mismatch: expected {list(want.shape)}, got {list(got.shape)}")
    if got.dtype != want.dtype:
        return Staged.known(f"dtype mismatch: expected {dtype_name(want.dtype)}, "
                            f"got {dtype_name(got.dtype)}")
    got = got.detach().to(want.device)
    want = want.detach()
    if want.numel() == 0:
        return Staged.known(None)
    a_tol, r_tol = tolerance_for(dtype_name(want.dtype), atol, rtol)
    a_tol *= atol_scale
    flat_got, flat_want = got.reshape(-1), want.reshape(-1)
    floating = want.dtype.is_floating_point or want.dtype.is_complex
    # Per chunk: the count of mismatches and (floating) the squared norms of the error and of
    # the reference, read back together at the end: one wait for the device per comparison
    # (a wait may sit out other contexts' time slices), not three per chunk.
    sums: list[torch.Tensor] = []
    starts = range(0, flat_want.numel(), CHUNK)
    for lo in starts:
        g, w = _wide(flat_got[lo:lo + CHUNK]), _wide(flat_want[lo:lo + CHUNK])
        bad, diff = _mismatches(g, w, a_tol, r_tol)
        sums.append(bad.sum().to(torch.float64))
        if floating:
            finite = torch.isfinite(diff)
            sums.append(torch.where(finite, diff, 0.0).square().sum())
            sums.append(torch.where(finite, w.abs().to(torch.float64), 0.0).square().sum())
    per = 3 if floating else 1

    def finish(values: list[Any]) -> str | None:
        counts = [int(v) for v in values[0::per]]
        err_sq = sum(values[1::per]) if floating else 0.0
        ref_sq = sum(values[2::per]) if floating else 0.0
        if sum(counts) == 0:
            if floating and atol is None and rtol is None and ref_sq > 0:
                # Elementwise tolerances alone let an answer with no work in it pass where
                # every reference value is below atol (zeros for a softmax over 65k values):
                # the error must also be small relative to the reference's own scale.
                rel = (err_sq / ref_sq) ** 0.5
                limit = REL_NORM_LIMITS.get(as_real(dtype_name(want.dtype)),
                                            10 * r_tol) * norm_slack
                if rel > limit:
                    return (f"every element of {describe(want)} is within atol={a_tol:g}, "
                            f"rtol={r_tol:g}, but the error relative to the reference's scale "
                            f"is {rel:.3g} (||got - expected|| / ||expected||, limit "
                            f"{limit:g}): the values are below the absolute tolerance, not "
                            "correct")
            return None
        return _mismatch_report(flat_got, flat_want, want, starts, counts, a_tol, r_tol)

    return Staged(sums, finish)


def _mismatch_report(flat_got: torch.Tensor, flat_want: torch.Tensor, want: torch.Tensor,
                     starts: range, counts: list[int], a_tol: float, r_tol: float) -> str:
    """What a failing comparison says: how many differ, the worst and the first (their chunks
    looked at again)."""
    import torch

    n_bad, first, worst, worst_abs = sum(counts), -1, 0, -1.0
    for lo, count in zip(starts, counts):
        if count == 0:
            continue
        g, w = _wide(flat_got[lo:lo + CHUNK]), _wide(flat_want[lo:lo + CHUNK])
        bad, diff = _mismatches(g, w, a_tol, r_tol)
        if first < 0:
            first = lo + int(bad.nonzero()[0].item())
        finite_diff = torch.where(bad & torch.isfinite(diff), diff, torch.zeros_like(diff))
        i = int(finite_diff.argmax().item())
        if float(finite_diff[i].item()) > worst_abs:
            worst, worst_abs = lo + i, float(finite_diff[i].item())
    ref_at_worst = float(_wide(flat_want[worst]).abs().to(torch.float64).item())
    worst_rel = worst_abs / ref_at_worst if ref_at_worst > 0 else float("inf")
    got_v = _scalar(_wide(flat_got[first]))
    want_v = _scalar(_wide(flat_want[first]))
    return (
        f"{n_bad} of {want.numel()} elements of {describe(want)} differ beyond "
        f"atol={a_tol:g}, rtol={r_tol:g}; max abs diff {worst_abs:.6g} at "
        f"{_index(worst, want.shape)} (rel {worst_rel:.3g}); first mismatch at {_index(first, want.shape)}: "
        f"got {got_v}, expected {want_v}"
    )


def _mismatches(
    got: torch.Tensor, want: torch.Tensor, a_tol: float, r_tol: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(mask of elements that do not match, |got - want| as float64) for one chunk."""
    import torch

    if want.dtype.is_floating_point or want.dtype.is_complex:
        g = got.to(torch.complex128 if want.dtype.is_complex else torch.float64)
        w = want.to(g.dtype)
        diff = (g - w).abs()
        finite = torch.isfinite(w) & torch.isfinite(g)
        close = finite & (diff <= a_tol + r_tol * w.abs())
        both_nan = torch.isnan(g) & torch.isnan(w)
        same_inf = torch.isinf(w) & (g == w)
        return ~(close | both_nan | same_inf), diff.to(torch.float64)
    g = got.to(torch.int64) if got.dtype != torch.bool else got
    w = want.to(torch.int64) if want.dtype != torch.bool else want
    return g != w, (g.to(torch.float64) - w.to(torch.float64)).abs()


def _wide(t: torch.Tensor) -> torch.Tensor:
    """``t`` as float32 if it is a float8 tensor (which float32 holds exactly), else itself:
    a GPU has few float8 operations beyond casts (no subtraction, no ``isfinite``)."""
    import torch

    return t.to(torch.float32) if t.dtype.is_floating_point and t.dtype.itemsize == 1 else t


def _index(flat: int, shape: tuple[int, ...] | torch.Size) -> list[int]:
    index = []
    for dim in reversed(tuple(shape)):
        index.append(flat % dim if dim else 0)
        flat //= dim if dim else 1
    return list(reversed(index))


def _scalar(t: torch.Tensor) -> float | int | bool:
    value = t.item()
    return round(value, 8) if isinstance(value, float) else value
