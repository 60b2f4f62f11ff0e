"""The audit of timed samples: a kept sample's outputs against the reference on its inputs.

The judge kept the outputs (its own copies, taken when the sample was answered, so the kernel
could not change them afterwards) of samples it chose after they ran
(:class:`judge.clock.KeptSamples`); it makes that sample's inputs again from the secret, runs
the reference on them and compares. A kernel that computes only when it is checked (it tells
a timing loop from a check by the pause between calls, the call stack, a call count) is
wrong on the samples most likely to be looked at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from compilation.base import Arguments, ExecutableKernel
from harness.tensors import Staged, first_of, resolve, stage_fingerprints, tensor_bytes, tensors_of
from judge.clock import Kept
from judge.errors import ReferenceFailed
from shared.protocol import Audited
from validation.compare import describe, stage_outputs, stage_tensor

if TYPE_CHECKING:
    from judge.judging import Judging

# The audit reads its checks back once per this much of the reference's outputs.
AUDIT_READ_BYTES = 64 * 2**20

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


def audit_kept(judge: Judging) -> Audited:
    """The kept timed samples checked: the reference run again on each one's inputs (the
    prepared copies, or made again from the secret and checked against the prints taken
    when the sample ran) and compared with the outputs the judge kept. The checks of
    several samples are read back together, each time AUDIT_READ_BYTES of inputs made
    again and of the reference's outputs are held."""
    run, fresh = judge.run, judge.run_inputs
    if run is None or not run.kept.kept or fresh is None:
        return Audited(skipped="no timed sample was kept")
    job = judge.comparison
    assert job is not None
    judge.spent.start()
    ahead = judge.prepared
    checked: list[int] = []
    pending: list[_AuditCheck] = []
    # the reference's buffers as the trials left them: put back after the audit's runs,
    # for the recheck that follows it
    buffers = judge.module_buffers() or {}
    as_left = {k: v.detach().clone() for k, v in buffers.items()}

    def settle() -> Audited | None:
        """The pending checks read back: the first failing sample's answer, if any."""
        unchecked: Staged[Any] = Staged.known(None)  # (inputs not made again)
        found = judge.resolved(*[part for check in pending
                                for part in (check.prints or unchecked, check.outputs)])
        judge.spent.lap("check")
        for check, prints, problem in zip(pending, found[0::2], found[1::2]):
            if prints is not None and prints != check.expected:
                return Audited(samples=run.kept.seen, expected=True, skipped=(
                    "the reference's inputs come out different when made again "
                    "(get_inputs is not reproducible)"))
            if problem is not None:
                return Audited(checked=[*checked, check.index], samples=run.kept.seen,
                               problem=problem, wrong_sample=check.index)
            checked.append(check.index)
        pending.clear()
        return None

    try:
        held = 0
        for kept in run.kept.kept:
            prints: Staged[list[list[int]]] | None = None
            if ahead is not None and kept.index < len(ahead.values):
                values = ahead.values[kept.index]
            else:
                # (a copy: the next sample's inputs may be made in the same tensors)
                values = copied_values(judge.sample_values(fresh, kept.index))
                prints = stage_fingerprints(tensors_of(values))
                held += tensor_bytes(values)
            judge.spent.lap("inputs")
            args = Arguments(values, specs_of(judge.kernel()))
            before = {k: v.detach().clone() for k, v in buffers.items()}
            want = judge.run_reference(args, wait=False)
            judge.spent.lap("reference")
            if any(not torch.equal(buffers[k], v) for k, v in before.items()):
                return Audited(samples=run.kept.seen, expected=True, skipped=(
                    "the reference's module state changes with every call, so its "
                    "outputs depend on the calls before"))
            pending.append(_AuditCheck(
                kept.index, prints, kept.input_prints,
                stage_difference(kept, want, job.atol, job.rtol)))
            held += tensor_bytes(want)
            if held > AUDIT_READ_BYTES:
                answer, held = settle(), 0
                if answer is not None:
                    return answer
        answer = settle() if pending else None
        if answer is not None:
            return answer
    except ReferenceFailed as exc:
        return Audited(samples=run.kept.seen,
                       skipped=f"the reference could not run again: {exc}"[:300])
    finally:
        for name, value in as_left.items():
            buffers[name].copy_(value)
    return Audited(checked=checked, samples=run.kept.seen, spent_ms=judge.spent.taken())


@dataclass
class _AuditCheck:
    """A kept sample's check, staged: its inputs' prints where they were made again (against
    ``expected``, those of the sample as it ran), its outputs against the reference's."""

    index: int
    prints: Staged[list[list[int]]] | None
    expected: list[list[int]]
    outputs: Staged[str | None]


def copied_values(values: list[Any]) -> list[Any]:
    """``values`` with every tensor copied (nested lists and tuples too): inputs made in place
    for the next sample leave these alone."""
    out: list[Any] = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(v.clone())
        elif isinstance(v, (list, tuple)):
            out.append(type(v)(copied_values(list(v))))
        else:
            out.append(v)
    return out


def specs_of(exe: ExecutableKernel) -> Any:
    return list(exe.io.args) if exe.io is not None else None
