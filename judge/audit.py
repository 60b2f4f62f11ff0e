"""The audit of timed samples: a kept sample's outputs against the reference on its inputs.

The judge kept the outputs (its own copies, taken when the sample was answered, so the kernel
could not change them afterwards) of samples it chose after they ran
(:class:`judge.clock.KeptSamples`); it makes that sample's inputs again from the secret, runs
the reference on them and compares. A kernel that computes only when it is checked (it tells
a timing loop from a check by the pause between calls, the call stack, a call count) is
wrong on the samples most likely to be looked at.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.tensors import Staged, resolve
from judge.clock import Kept
from validation.compare import describe, stage_outputs, stage_tensor

AUDIT_NORM_SLACK = 10.0  # a sampled output's relative-norm check: 10x the trials' limit


def difference(kept: Kept, want: list[torch.Tensor], atol: float | None,
               rtol: float | None) -> str | None:
    """What differs between a kept sample's outputs and the reference's ``want``; None if
    nothing does. Outputs kept as values at random positions are compared there."""
    return resolve(stage_difference(kept, want, atol, rtol))[0]


def stage_difference(kept: Kept, want: list[torch.Tensor], atol: float | None,
                     rtol: float | None) -> Staged[str | None]:
    """:func:`difference`, staged: several samples' checks read back at once
    (:func:`harness.tensors.resolve`)."""
    where = f"timed sample {kept.index + 1} (picked after it ran) against the reference on " \
            "the same inputs"

    def at(problem: str | None) -> str | None:
        return None if problem is None else f"{where}: {problem}"

    if all(p is None for p in kept.positions):
        whole = stage_outputs(kept.outputs, want, atol, rtol)
        return Staged(whole.scalars, lambda values: at(whole.finish(values)))
    if len(kept.outputs) != len(want):
        return _said(at(f"the timed call returned {len(kept.outputs)} output(s) but the "
                        f"reference {len(want)}"))
    each: list[tuple[str, Staged[str | None], str]] = []
    for i, (got, positions, ref) in enumerate(zip(kept.outputs, kept.positions, want)):
        label = f"output {i}" if len(want) > 1 else "output"
        if positions is None:
            each.append((label, stage_tensor(got, ref, atol, rtol), ""))
        elif got.dtype != ref.dtype:
            each.append((label, _said(f"dtype mismatch: expected {describe(ref)}, got "
                                      f"{got.dtype}"), ""))
        else:
            picked = ref.reshape(-1).index_select(0, positions.to(ref.device))
            each.append((label, stage_tensor(got, picked, atol, rtol, AUDIT_NORM_SLACK),
                         f"{got.numel()} elements sampled at random from {describe(ref)}: "))

    def finish(values: list[Any]) -> str | None:
        start = 0
        for label, one, prefix in each:
            problem = one.finish(values[start:start + len(one.scalars)])
            start += len(one.scalars)
            if problem is not None:
                return at(f"{label}: {prefix}{problem}")
        return None

    return Staged([s for _, one, _ in each for s in one.scalars], finish)


def _said(problem: str | None) -> Staged[str | None]:
    """A check whose answer is known without reading the device."""
    return Staged([], lambda _: problem)
