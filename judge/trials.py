"""A correctness trial of the paired kernel's process, and what is wrong with its call: its
outputs against the reference's, and the inputs it had to leave alone (the judge's checks,
read back with one wait for the device)."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import torch

from harness.inputs import derive, trial_salt
from harness.tensors import describe, meta, resolve, stage_fingerprints, tensors_of
from judge.handover import write_inputs
from shared.protocol import CallDone, CallPurpose
from validation.compare import stage_outputs

if TYPE_CHECKING:
    from judge.judging import Judging


def trial_problem(judge: Judging, done: CallDone, want: list[torch.Tensor],
                  prints: list[list[int]] | None) -> str | None:
    """What is wrong with a trial's call: its outputs against ``want``, then (``prints``:
    the inputs' fingerprints before it) the inputs it must have left alone; both read
    back with one wait for the device."""
    arena, job = judge.arena, judge.comparison
    assert arena is not None and job is not None
    if not done.copied:
        return missing_outputs(done, want)
    got = [slot.clone() for slot in arena.outputs]
    before = prints or []
    watched = [i for i, (must_stay, _) in enumerate(zip(input_roles(judge), arena.inputs))
               if must_stay and i < len(before)]
    staged = (stage_outputs(got, want, job.atol, job.rtol),
              stage_fingerprints([arena.inputs[i] for i in watched]))
    judge.spent.lap("check")
    outputs, inputs_now = resolve(*staged)
    judge.spent.lap("read")  # the one wait for the device, with the read back
    if outputs is not None:
        return str(outputs)
    for i, print_now in zip(watched, inputs_now):
        if print_now != before[i]:
            return (f"the kernel modified its input {input_name(judge, i)}, which the "
                    "reference leaves unchanged (declare it role 'inout' if writing it is "
                    "intended)")
    return None


def one_trial(judge: Judging, trial: int, recheck: bool) -> tuple[str | None, bool]:
    """(what is wrong with the kernel's outputs of ``trial``, or None; whether the
    reference wrote its own inputs)."""
    arena = judge.arena
    assert arena is not None, "calibrate first: it maps the arena"
    spent = judge.spent
    if trial == 0 and not recheck and judge.saved_state is None:
        # a stateless reference: trial 0's outputs as made once for every pairing
        first = judge.first_trial()
        want, mutates, prints = first.outputs, first.mutates, first.prints
        write_inputs(arena, judge.trial0_values())
        spent.lap("inputs")
    else:
        # (a reference with module state runs every trial in step with the kernel: its
        # outputs may depend on how often it was called, e.g. training-mode BatchNorm)
        salt = derive(judge.secret or 0, "recheck") if recheck else \
            trial_salt(judge.secret, trial)
        args = judge.make_inputs(trial, salt)
        values = list(args.values)
        before = stage_fingerprints(tensors_of(values))
        write_inputs(arena, values)
        spent.lap("inputs")
        want = judge.run_reference(args, wait=False)
        prints, after = judge.resolved(before, stage_fingerprints(tensors_of(values)))
        mutates = after != prints
        spent.lap("reference")
    # The kernel's process reads the slots from its own context: the copies into them
    # must have landed first. (Trial 0's copy was not waited for: where a pairing's arena
    # was new and no calibration had written it, a busy GPU let the kernel read memory
    # not yet written: 2 and 4 of 50 honest relu twins falsely "incorrect" in two runs.)
    judge.timer.sync()
    done = judge.paired().call(CallPurpose.TRIAL, trial)
    spent.lap("call")
    judge.peak_trial_memory = max(judge.peak_trial_memory, done.peak_memory_bytes)
    problem = trial_problem(judge, done, want, None if mutates else prints)
    spent.lap("check")
    return problem, mutates


def missing_outputs(done: CallDone, want: list[torch.Tensor]) -> str:
    """What is wrong with a call that handed no outputs over."""
    if len(done.outputs) != len(want):
        return (f"the kernel produced {len(done.outputs)} output(s) but the reference "
                f"produced {len(want)}: custom [{', '.join(map(describe, done.outputs))}]"
                f", reference [{', '.join(describe(meta(t)) for t in want)}]")
    for i, (said, ref) in enumerate(zip(done.outputs, want)):
        label = f"output {i}: " if len(want) > 1 else "output: "
        if said.shape != list(ref.shape):
            return f"{label}shape mismatch: expected {list(ref.shape)}, got {said.shape}"
        if said.dtype != meta(ref).dtype:
            return f"{label}dtype mismatch: expected {meta(ref).dtype}, got {said.dtype}"
    return "the kernel's process did not hand its outputs over"


def input_roles(judge: Judging) -> list[bool]:
    """Per input slot of the arena: whether a call must leave it unchanged. A tensor the
    reference takes as ``input`` must stay as it was unless the kernel's own IOContract
    declares its slot ``inout`` (its input and inout tensors take the reference's input
    and inout tensors in order, as :func:`compilation.base.share_inputs` binds them)."""
    job, arena = judge.comparison, judge.arena
    assert job is not None and job.ref_kernel is not None and arena is not None
    ref_io, own_io = job.ref_kernel.io, job.kernel.io
    ref_roles = [a.role for a in ref_io.args if a.type == "tensor"] if ref_io else None
    own_roles = ([a.role for a in own_io.args
                  if a.type == "tensor" and a.role in ("input", "inout")]
                 if own_io else None)
    roles, k = [], 0
    for i in range(len(arena.inputs)):
        ref_role = ref_roles[i] if ref_roles is not None and i < len(ref_roles) else "input"
        own_role = "input"
        if ref_role in ("input", "inout"):
            if own_roles is not None and k < len(own_roles):
                own_role = own_roles[k]
            k += 1
        roles.append(ref_role == "input" and own_role == "input")
    return roles

def input_name(judge: Judging, position: int) -> str:
    job = judge.job
    assert job is not None and job.ref_kernel is not None
    io = job.ref_kernel.io
    if io is not None:
        names = [a.name for a in io.args if a.type == "tensor"]
    else:
        fn = getattr(judge.kernel(), "fn", None)
        target: Any = getattr(fn, "forward", fn)
        try:
            names = [p.name for p in inspect.signature(target).parameters.values()
                     if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            names = []
    return f"'{names[position]}'" if position < len(names) else f"#{position}"
