"""The audit of timed samples: a kept sample's outputs against the reference on its inputs.

The judge kept the outputs (its own copies, taken when the sample was answered, so the kernel
could not change them afterwards) of samples it chose after they ran
(:class:`judge.clock.KeptSamples`); it makes that sample's inputs again from the secret, runs
the reference on them and compares. A kernel that computes only when it is checked (it tells
a timing loop from a check by the pause between calls, the call stack, a call count) is
wrong on the samples most likely to be looked at.
"""

from __future__ import annotations

import torch

from judge.clock import Kept
from validation.compare import compare_outputs, compare_tensor, describe

AUDIT_NORM_SLACK = 10.0  # a sampled output's relative-norm check: 10x the trials' limit


def difference(kept: Kept, want: list[torch.Tensor], atol: float | None,
               rtol: float | None) -> str | None:
    """What differs between a kept sample's outputs and the reference's ``want``; None if
    nothing does. Outputs kept as values at random positions are compared there."""
    where = f"timed sample {kept.index + 1} (picked after it ran) against the reference on " \
            "the same inputs"
    if all(p is None for p in kept.positions):
        problem = compare_outputs(kept.outputs, want, atol, rtol)
        return None if problem is None else f"{where}: {problem}"
    if len(kept.outputs) != len(want):
        return (f"{where}: the timed call returned {len(kept.outputs)} output(s) but the "
                f"reference {len(want)}")
    for i, (got, positions, ref) in enumerate(zip(kept.outputs, kept.positions, want)):
        label = f"output {i}" if len(want) > 1 else "output"
        if positions is None:
            problem = compare_tensor(got, ref, atol, rtol)
        elif got.dtype != ref.dtype:
            problem = f"dtype mismatch: expected {describe(ref)}, got {got.dtype}"
        else:
            picked = ref.reshape(-1).index_select(0, positions.to(ref.device))
            problem = compare_tensor(got, picked, atol, rtol, AUDIT_NORM_SLACK)
            if problem is not None:
                problem = (f"{got.numel()} elements sampled at random from {describe(ref)}: "
                           f"{problem}")
        if problem is not None:
            return f"{where}: {label}: {problem}"
    return None
