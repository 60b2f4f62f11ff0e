"""Robustness cases: a correct candidate checked again on inputs unlike its trials'.

The correctness trials draw every input from the problem's own distribution (N(0, 1) for most
problems), so a kernel that is right only there passes them: a polynomial for tanh that holds
for |x| < 3, a clamp to [-5, 5], an absolute epsilon that swamps small inputs. Each case varies
a sample's inputs as made (an IOContract's input tensors, or what ``get_inputs()`` returned; a
module's weights are not inputs and stay as built):

==============  ===========================================================================
scale_1e-3      every floating-point input x1e-3
scale_1e3       every floating-point input x1e3
uniform         every floating-point input uniform over its own range [min, max] (the same
                scale and sign, so an op's domain is kept: a positive input stays positive)
outliers        one element in OUTLIER_EVERY of every floating-point input (at least one;
                positions drawn from the judge's secret) x OUTLIER_FACTOR
zeros           every floating-point input all zeros
==============  ===========================================================================

Integer and boolean tensors (indices, shapes, masks), scalars and an IOContract's output
buffers stay as made; a complex tensor is varied in its real and imaginary parts.

Whether a case applies is the reference's to say: a case whose reference output holds a NaN or
an infinity where trial 0's had none (the log of zeros, a vector divided by its norm of zero),
or lies wholly below its dtype's normal range (rounding and nothing else), is skipped with the
reason, never failed.

The tolerance is the trials' (:func:`validation.compare.stage_tensor`: the request's atol and
rtol or the dtype's, and the relative-norm check where neither is overridden), with atol scaled
per output by ``max|reference| / max|reference on trial 0|``: a floating-point kernel's error
follows the size of what it computes, so an atol fixed for outputs of trial 0's size would pass
any answer at x1e-3 (where every output is below it) and fail honest ones at x1e3. The scaled
atol is never below two units of the output dtype's subnormal range (an output of zeros is
held to that, not to bit equality). The other shapes a problem declares are other sizes of
the same problem, compared as trials are.

Each case reports the largest absolute error, and the largest relative error where the
reference is not zero, with where each occurred (``[output, *index]``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from kernel_eval_client.io_contract import ArgSpec

from harness.tensors import first_of, resolve
from shared.models import RobustnessCase
from validation.compare import CHUNK, dtype_name, stage_tensor
from validation.tolerances import tolerance_for

OUTLIER_EVERY = 1000
OUTLIER_FACTOR = 1e3
CaseKind = Literal["scale", "distribution", "shape"]


@dataclass(frozen=True)
class Case:
    """One way to vary the inputs: ``vary`` maps a floating-point input (float32, or float64
    for float64 data) to a new tensor of the same shape, leaving its argument alone."""

    name: str
    kind: CaseKind
    vary: Callable[[torch.Tensor, torch.Generator], torch.Tensor]


def _uniform(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    finite = x[torch.isfinite(x)]
    if finite.numel() == 0:
        return x.clone()
    low, high = float(finite.min()), float(finite.max())
    if low == high:  # a constant input has no range to spread over
        return x.clone()
    return torch.empty_like(x).uniform_(low, high, generator=gen)


def _outliers(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    flat = x.reshape(-1).clone()
    if flat.numel() == 0:
        return flat.reshape(x.shape)
    at = torch.randint(flat.numel(), (max(1, flat.numel() // OUTLIER_EVERY),), generator=gen,
                       device=flat.device)
    flat[at] = flat[at] * OUTLIER_FACTOR
    return flat.reshape(x.shape)


CASES: tuple[Case, ...] = (
    Case("scale_1e-3", "scale", lambda x, gen: x * 1e-3),
    Case("scale_1e3", "scale", lambda x, gen: x * 1e3),
    Case("uniform", "distribution", _uniform),
    Case("outliers", "distribution", _outliers),
    Case("zeros", "distribution", lambda x, gen: torch.zeros_like(x)),
)


def varied(values: list[Any], specs: list[ArgSpec] | None, case: Case,
           seed: int) -> list[Any] | None:
    """``values`` (one call's arguments, with their IOContract ``specs`` where they have
    them) with every floating-point input varied by ``case``, random draws seeded by
    ``seed``; None when there is no such input. Every tensor of the answer is new: a
    reference that writes its inputs reaches neither ``values`` nor another case's."""
    generators: dict[torch.device, torch.Generator] = {}
    count = 0

    def generator(device: torch.device) -> torch.Generator:
        if device not in generators:
            generators[device] = torch.Generator(device=device).manual_seed(seed)
        return generators[device]

    def one(value: Any, vary: bool) -> Any:
        nonlocal count
        if isinstance(value, torch.Tensor):
            if not (vary and _floating(value)):
                return value.clone()
            count += 1
            if value.is_complex():
                parts = _varied_real(torch.view_as_real(value), case, generator)
                return torch.view_as_complex(parts.contiguous())
            return _varied_real(value, case, generator)
        if isinstance(value, (list, tuple)):
            return type(value)(one(v, vary) for v in value)
        return value

    if specs is None:
        out = [one(v, True) for v in values]
    else:
        out = [one(v, s.type == "tensor" and s.role in ("input", "inout"))
               for v, s in zip(values, specs)]
    return out if count else None


def _varied_real(t: torch.Tensor, case: Case,
                 generator: Callable[[torch.device], torch.Generator]) -> torch.Tensor:
    work = t.to(torch.float64 if t.dtype == torch.float64 else torch.float32)
    return case.vary(work, generator(t.device)).to(t.dtype)


def skip_reason(want: list[torch.Tensor], nominal: list[torch.Tensor] | None) -> str | None:
    """Why a case whose reference outputs are ``want`` cannot tell a right kernel from a
    wrong one (None when it can): ``nominal`` are trial 0's reference outputs (None: the
    case is a size of its own, held to finite outputs)."""
    for i, w in enumerate(want):
        if not _floating(w) or w.numel() == 0:
            continue
        label = f"output {i}" if len(want) > 1 else "output"
        n = nominal[i] if nominal is not None and i < len(nominal) else None
        if not _all_finite(w) and (n is None or _all_finite(n)):
            return (f"the reference's {label} is not finite on these inputs (NaN or infinity "
                    "where trial 0's had none)")
        peak = _peak(w)
        if 0 < peak < torch.finfo(w.dtype).smallest_normal:
            return (f"the reference's {label} lies wholly below the normal range of "
                    f"{dtype_name(w.dtype)} (largest magnitude {peak:.3g}): nothing there "
                    "but rounding")
    return None


def atol_scales(want: list[torch.Tensor], nominal: list[torch.Tensor] | None,
                atol: float | None) -> list[float]:
    """Per output, the factor on its absolute tolerance (the module docstring's rule)."""
    scales = []
    for i, w in enumerate(want):
        n = nominal[i] if nominal is not None and i < len(nominal) else None
        a_tol = tolerance_for(dtype_name(w.dtype), atol, None)[0]
        if n is None or not _floating(w) or w.numel() == 0 or a_tol <= 0:
            scales.append(1.0)
            continue
        nominal_peak = _peak(n)
        scale = _peak(w) / nominal_peak if nominal_peak > 0 else 1.0
        info = torch.finfo(w.dtype)
        scales.append(max(scale, 2 * info.smallest_normal * info.eps / a_tol))
    return scales


@dataclass
class Worst:
    """The largest errors of a case's outputs and where they are (``[output, *index]``)."""

    max_abs: float | None = None
    abs_at: list[int] | None = None
    max_rel: float | None = None
    rel_at: list[int] | None = None


def worst_error(got: list[torch.Tensor], want: list[torch.Tensor]) -> Worst:
    """The largest ``|got - want|`` over elements finite in both, and the largest
    ``|got - want| / |want|`` over those where ``want`` is not zero (outputs whose shape or
    dtype differ are left out: the comparison says so)."""
    worst = Worst()
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype or w.numel() == 0:
            continue
        flat_g, flat_w = g.reshape(-1), w.reshape(-1)
        for lo in range(0, w.numel(), CHUNK):
            gg, ww = _exact(flat_g[lo:lo + CHUNK]), _exact(flat_w[lo:lo + CHUNK])
            # (not compared, where either is not finite or the reference is zero: -1)
            diff = torch.nan_to_num((gg - ww).abs(), nan=-1.0, posinf=-1.0)
            rel = torch.nan_to_num(diff / ww.abs(), nan=-1.0, posinf=-1.0)
            j, k = int(diff.argmax()), int(rel.argmax())
            top, top_rel = float(diff[j]), float(rel[k])
            if top >= 0 and (worst.max_abs is None or top > worst.max_abs):
                worst.max_abs, worst.abs_at = top, [i, *_index(lo + j, w.shape)]
            if top_rel >= 0 and (worst.max_rel is None or top_rel > worst.max_rel):
                worst.max_rel, worst.rel_at = top_rel, [i, *_index(lo + k, w.shape)]
    return worst


def judged(name: str, kind: CaseKind, got: list[torch.Tensor], want: list[torch.Tensor],
           nominal: list[torch.Tensor] | None, atol: float | None, rtol: float | None,
           shapes: list[list[int]] | None = None) -> RobustnessCase:
    """The case's verdict on the kernel's outputs ``got`` against the reference's ``want``
    (its atol scaled from ``nominal``, trial 0's reference outputs, where given)."""
    scales = atol_scales(want, nominal, atol)
    if len(got) != len(want):
        problem: str | None = (f"the kernel produced {len(got)} output(s) but the reference "
                               f"produced {len(want)}")
    else:
        problem = resolve(first_of([
            (f"output {i}: " if len(want) > 1 else "output: ",
             stage_tensor(g, w, atol, rtol, atol_scale=s))
            for i, (g, w, s) in enumerate(zip(got, want, scales))]))[0]
    tolerances = [tolerance_for(dtype_name(w.dtype), atol, rtol) for w in want]
    worst = worst_error(got, want)
    return RobustnessCase(
        name=name, kind=kind, status="failed" if problem else "passed", reason=problem,
        shapes=shapes,
        atol=max((a * s for (a, _), s in zip(tolerances, scales)), default=None),
        rtol=max((r for _, r in tolerances), default=None),
        max_abs_error=worst.max_abs, max_abs_at=worst.abs_at,
        max_rel_error=worst.max_rel, max_rel_at=worst.rel_at)


def skipped(name: str, kind: CaseKind, reason: str,
            shapes: list[list[int]] | None = None) -> RobustnessCase:
    return RobustnessCase(name=name, kind=kind, status="skipped", reason=reason, shapes=shapes)


def failed(name: str, kind: CaseKind, reason: str,
           shapes: list[list[int]] | None = None) -> RobustnessCase:
    return RobustnessCase(name=name, kind=kind, status="failed", reason=reason, shapes=shapes)


def _floating(t: torch.Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


def _exact(t: torch.Tensor) -> torch.Tensor:
    """``t`` in a type its differences are exact in, or nearly: float32 for the narrower
    floats (a difference of two float16 values is a float32 one), float64 and complex128
    for the wider and for integers."""
    if t.is_complex():
        return t.to(torch.complex128)
    if t.is_floating_point() and t.dtype != torch.float64:
        return t.to(torch.float32)
    return t.to(torch.float64)


def _plain(t: torch.Tensor) -> torch.Tensor:
    """``t``, or float32 for float8 (which a GPU does little with beyond casts)."""
    return t.to(torch.float32) if t.is_floating_point() and t.dtype.itemsize == 1 else t


def _all_finite(t: torch.Tensor) -> bool:
    return math.isfinite(_extreme(t))


def _peak(t: torch.Tensor) -> float:
    """The largest finite magnitude in ``t`` (0 if none)."""
    extreme = _extreme(t)
    if math.isfinite(extreme):
        return extreme
    magnitude = _plain(t).abs()
    return float(torch.nan_to_num(magnitude, nan=0.0, posinf=0.0).max())


def _extreme(t: torch.Tensor) -> float:
    """The largest magnitude in ``t``: NaN or infinite where any element is (two reductions,
    no copy of ``t``)."""
    if t.numel() == 0:
        return 0.0
    if t.is_complex():
        return float(t.abs().max())
    plain = _plain(t)
    ends = abs(float(plain.amax())), abs(float(plain.amin()))
    return math.nan if math.isnan(sum(ends)) else max(ends)


def _index(flat: int, shape: torch.Size) -> list[int]:
    index = []
    for dim in reversed(tuple(shape)):
        index.append(flat % dim if dim else 0)
        flat //= dim if dim else 1
    return list(reversed(index))
