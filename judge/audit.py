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

from harness.tensors import Staged, first_of, resolve
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
            "the same inputs: "
    if all(p is None for p in kept.positions):
        return first_of([(where, stage_outputs(kept.outputs, want, atol, rtol))])
    if len(kept.outputs) != len(want):
        return Staged.known(f"{where}the timed call returned {len(kept.outputs)} output(s) but "
                            f"the reference {len(want)}")
    parts: list[tuple[str, Staged[str | None]]] = []
    for i, (got, positions, ref) in enumerate(zip(kept.outputs, kept.positions, want)):
        label = f"{where}output {i}: " if len(want) > 1 else f"{where}output: "
        if positions is None:
            parts.append((label, stage_tensor(got, ref, atol, rtol)))
        elif got.dtype != ref.dtype:
            parts.append((label, Staged.known(f"dtype mismatch: expected {describe(ref)}, got "
                                              f"{got.dtype}")))
        else:
            picked = ref.reshape(-1).index_select(0, positions.to(ref.device))
            sampled = f"{label}{got.numel()} elements sampled at random from {describe(ref)}: "
            parts.append((sampled, stage_tensor(got, picked, atol, rtol, AUDIT_NORM_SLACK)))
    return first_of(parts)
