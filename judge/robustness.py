"""The judge's robustness cases (:class:`shared.protocol.Robustness`): after the recheck, the
candidate called again on inputs varied from a sample's (:mod:`validation.robustness`), and on
the other sizes a problem declares.

Each case is one reference call and one call of the kernel's process, on a sample made from
the pairing's secret (not trial 0's inputs, which the request names). The kernel's process
gets a case as it gets a correctness trial: a :class:`~shared.protocol.Call` of purpose
``trial``, numbered after the recheck, on inputs in the arena's slots.

Other sizes are a KernelBench source's module-level ``get_robustness_inputs()``: a list of
input lists, each as ``get_inputs()`` would return it for another size (at most
:data:`MAX_SHAPES` are run). Another size needs an arena of its own layout: the judge maps a
new one with the partner for each such case; these come last, and the kernel's process is
called on nothing after them, so the pairing's own arena is not mapped back. IOContract
problems declare none: a contract fixes its tensors' shapes, its scalars and its launch grid
together, so another size is another contract, another comparison. Nor can a candidate with
an IOContract of its own take them, for the same reason.

A case never fails the comparison: a kernel that raises fails that case; one whose process
dies or hangs fails it, and the cases after it are skipped; a reference that fails on a case's
inputs makes it skipped.

A case costs about what a correctness trial does (its inputs varied, one reference call, one
kernel call, the trials' comparison and a scan for the worst error). Measured through the
server on a 2-core Xeon CPU, softmax over float32 rows of 1024: 145 ms a case at 1024 rows
(a trial, 125-150 ms), 1.4-1.9 s at 8192 rows (a trial, 1.3-1.9 s).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from compilation.base import Arguments, InputError
from compilation.torch_backend import TorchKernel
from harness.arena import Arena, ArenaError, plan
from harness.failures import out_of_memory
from harness.inputs import derive
from harness.tensors import tensors_of
from judge.audit import copied_values
from judge.errors import ReferenceFailed
from judge.handover import write_inputs
from judge.partner import PartnerFailure, PartnerLost
from judge.trials import missing_outputs
from shared.models import RobustnessCase, RobustnessReport
from shared.protocol import CallDone, CallPurpose, MapArena, Robustness, RobustnessChecked
from validation.robustness import CASES, CaseKind, failed, judged, skip_reason, skipped, varied

if TYPE_CHECKING:
    import torch

    from judge.judging import Judging

# A case's call may take this long, or CALL_FACTOR times the reference's call on the same
# inputs where that is longer, before it counts as stuck: a kernel that hangs on zeros must
# not run the job into its timeout, which would take the verdict of its trials with it.
CALL_FLOOR_S = 10.0
CALL_FACTOR = 100.0
MAX_SHAPES = 8


def check(judge: Judging, message: Robustness) -> RobustnessChecked:
    """Every case, in :data:`validation.robustness.CASES` order, then the declared sizes."""
    started = time.perf_counter()
    cases = _Cases(judge, message.first)
    # the reference's buffers as the recheck left them (the audit that follows runs it)
    buffers = judge.module_buffers() or {}
    as_left = {k: v.detach().clone() for k, v in buffers.items()}
    try:
        cases.scaled()
        other_shapes = cases.shapes()
    finally:
        for name, value in as_left.items():
            buffers[name].copy_(value)
    return RobustnessChecked(report=RobustnessReport.of(
        cases.done, other_shapes, (time.perf_counter() - started) * 1e3))


class _Cases:
    """The cases run so far (``done``) and the kernel's calls, numbered from ``index``."""

    def __init__(self, judge: Judging, first: int) -> None:
        self.judge = judge
        self.index = first
        self.done: list[RobustnessCase] = []
        self.gone: str | None = None  # why the kernel's process can be called no more
        assert judge.secret is not None and judge.comparison is not None
        self.secret = judge.secret
        self.job = judge.comparison

    def scaled(self) -> None:
        """The scale and distribution cases, on one sample from the secret."""
        judge = self.judge
        try:
            base = judge.make_inputs(0, derive(self.secret, "robustness"))
        except ReferenceFailed as exc:
            for case in CASES:
                self.done.append(skipped(case.name, case.kind, "the reference's inputs could "
                                         f"not be made: {exc.failure.message[:300]}"))
            return
        nominal = judge.first_trial().outputs
        for case in CASES:
            values = varied(list(base.values), base.specs, case,
                            derive(self.secret, "robustness", case.name))
            if values is None:
                self.done.append(skipped(case.name, case.kind,
                                         "no floating-point input to vary"))
                continue
            self.run(case.name, case.kind, Arguments(values, base.specs), nominal)

    def shapes(self) -> str:
        """The sizes the problem declares, each a case; what ``other_shapes`` says."""
        judge, job = self.judge, self.job
        assert job.ref_kernel is not None
        if job.ref_kernel.io is not None:
            return ("not supported for an IOContract problem: its contract fixes its shapes, "
                    "scalars and launch grid together")
        if job.kernel.io is not None:
            return ("not supported for a candidate with its own IOContract: its contract "
                    "fixes its shapes")
        exe = judge.kernel()
        if not isinstance(exe, TorchKernel):
            return "none declared"
        try:
            with judge.scope():
                declared = exe.robustness_inputs(derive(self.secret, "robustness", "shapes"))
        except InputError as exc:
            return f"none run: {str(exc)[:300]}"
        if declared is None:
            return "none declared (a KernelBench source declares them with " \
                   "get_robustness_inputs())"
        for i, args in enumerate(declared[:MAX_SHAPES]):
            self.run(f"shapes_{i + 1}", "shape", args, None, own_arena=True)
        beyond = len(declared) - MAX_SHAPES
        return f"{len(declared)} declared by get_robustness_inputs()" + (
            f"; the last {beyond} not run (at most {MAX_SHAPES})" if beyond > 0 else "")

    def run(self, name: str, kind: CaseKind, args: Arguments,
            nominal: list[torch.Tensor] | None, own_arena: bool = False) -> None:
        """One case: the reference on a copy of ``args``, then the kernel on ``args`` in the
        arena (a new one of their layout where ``own_arena``), compared."""
        shapes = [list(t.shape) for t in tensors_of(args.values)] if own_arena else None
        if self.gone is not None:
            self.done.append(skipped(name, kind, self.gone, shapes))
            return
        try:
            self.done.append(self.one(name, kind, args, nominal, own_arena, shapes))
        except Exception as exc:
            if not out_of_memory(exc):
                raise
            self.done.append(skipped(name, kind, f"out of memory for this case: {exc}"[:300],
                                     shapes))

    def one(self, name: str, kind: CaseKind, args: Arguments,
            nominal: list[torch.Tensor] | None, own_arena: bool,
            shapes: list[list[int]] | None) -> RobustnessCase:
        judge = self.judge
        try:
            began = time.perf_counter()
            want = judge.run_reference(Arguments(copied_values(args.values), args.specs))
            reference_s = time.perf_counter() - began
        except ReferenceFailed as exc:
            return skipped(name, kind, "the reference failed on these inputs: "
                           f"{exc.failure.message[:300]}", shapes)
        why = skip_reason(want, nominal)
        if why is not None:
            return skipped(name, kind, why, shapes)
        arena = judge.arena
        assert arena is not None, "calibrate first: it maps the arena"
        own: Arena | None = None
        try:
            if own_arena:
                try:
                    own = Arena.create(plan(args.values, want, arena.layout.where), judge.device)
                except ArenaError as exc:
                    return skipped(name, kind, f"these inputs cannot be handed over: {exc}",
                                   shapes)
                arena = own
                unmapped = self.mapped(arena, name, kind, shapes)
                if unmapped is not None:
                    return unmapped
            write_inputs(arena, args.values)
            judge.timer.sync()  # (the kernel's process reads the slots from its own context)
            done = self.call(max(CALL_FLOOR_S, CALL_FACTOR * reference_s))
            if isinstance(done, str):
                return failed(name, kind, done, shapes)
            if not done.copied:
                return failed(name, kind, missing_outputs(done, want), shapes)
            got = [slot.clone() for slot in arena.outputs]
            return judged(name, kind, got, want, nominal, self.job.atol, self.job.rtol,
                          shapes)
        finally:
            if own is not None:
                own.close()

    def mapped(self, arena: Arena, name: str, kind: CaseKind,
               shapes: list[list[int]] | None) -> RobustnessCase | None:
        """The kernel's process maps ``arena`` (None), or the case as that ends it: skipped
        where the process could not map it, failed where the process went away."""
        try:
            self.judge.paired().map_arena(MapArena(layout=arena.layout), arena.fd)
        except PartnerFailure as exc:
            return skipped(name, kind, "the kernel's process could not map these inputs: "
                           f"{exc.failure.message[:300]}", shapes)
        except PartnerLost as exc:
            self.gone = "the kernel's process went away in an earlier case"
            return failed(name, kind, f"the kernel's process went away on these inputs: {exc}",
                          shapes)
        return None

    def call(self, within_s: float) -> CallDone | str:
        """The kernel's process called on the arena's inputs: its answer, or what went wrong
        (words; where its process can be called no more, :attr:`gone` says so)."""
        partner = self.judge.paired()
        index, self.index = self.index, self.index + 1
        try:
            partner.ask(CallPurpose.TRIAL, index)
            done = partner.answer(index, within_s)
        except PartnerFailure as exc:
            return f"the kernel failed on these inputs: {exc.failure.message[:500]}"
        except PartnerLost as exc:
            self.gone = "the kernel's process went away in an earlier case"
            detail = f" ({exc.broke_protocol[:200]})" if exc.broke_protocol else ""
            return f"the kernel's process went away on these inputs: {exc}{detail}"
        if done is None:
            self.gone = "the kernel's call in an earlier case did not return"
            return f"the kernel's call did not return within {within_s:.3g} s on these inputs"
        return done
