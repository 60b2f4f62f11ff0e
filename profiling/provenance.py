"""Launch provenance and precision parity of a timed result.

After its timing, each side's process traces one more call of its kernel
(:class:`shared.protocol.CallTrace`, ``observed_by: "kernel_process"``: CUPTI's activity API
sees only the process it runs in): the device work the call launched and the math modes torch
had set around it. From the candidate's and the reference's traces and the job's sources,
:func:`assemble` makes what a result carries:

- a provenance block per side (:class:`Provenance`): every launch with its origin
  (:mod:`profiling.kernel_origins`: the submission's own, generated, library, framework,
  memory), the share of device time in the submission's own kernels, and, for a submission
  that promises kernels of its own (``triton``, ``cuda``, ``torch_cuda``, a kernel language,
  or a source that defines kernels), whether none of them ran;
- the two sides' math modes side by side (:class:`PrecisionParity`), with every way the
  candidate's were looser than its reference's: TF32 for matmuls or cuDNN,
  ``float32_matmul_precision``, reduced-precision fp16/bf16 reductions, fp16 accumulation,
  or kernels whose names say they compute in TF32 where the reference, on float32 inputs,
  ran none;
- the integrity reasons these give.

A trace is the kernel's process's report about itself, and the kernel owns that process: a
reason it gives flags the result for review; its silence proves nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, Field

from profiling.kernel_origins import Origin, OwnKernels, classify, computes_in_tf32, own_kernels
from shared.languages import imported_languages
from shared.models import KernelCode, KernelType
from shared.observations import CallTrace, MathModes, TracedLaunch

PROVENANCE_CHECK = "launch provenance: one call traced by the kernel's own process (CUPTI)"
PARITY_CHECK = "precision parity: the math modes each side ran its traced call under"
# Kernel types whose answers are kernels of their own, whatever their sources define.
PROMISING_TYPES = (KernelType.TRITON, KernelType.CUDA, KernelType.TORCH_CUDA)
PRECISION_RANK = {"highest": 0, "high": 1, "medium": 2}
SHOWN_NAMES = 3  # kernels named in a reason
ALWAYS_UNSEEN = [
    "work in other processes: CUPTI's activity API sees only the process that traced the call",
    ("calls other than the traced one: it is one more call after the timing, and a call whose "
     "path changes between calls (a cache, a first-call branch) may launch other work"),
    ("math modes switched from C++ or through setters bound before the call, except as the "
     "modes before and after it and the names of the kernels it ran"),
    "whether it is true: the kernel's own process made this record, and the kernel owns it",
]
# The looser-than-the-reference findings, by MathModes flag: what the flag allows.
LOOSER_FLAGS = {
    "matmul_tf32": "TF32 for float32 matmuls (torch.backends.cuda.matmul.allow_tf32)",
    "cudnn_tf32": "TF32 for cuDNN's float32 convolutions (torch.backends.cudnn.allow_tf32)",
    "fp16_reduced_precision_reduction": (
        "reduced-precision reductions in fp16 matmuls "
        "(torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction)"),
    "bf16_reduced_precision_reduction": (
        "reduced-precision reductions in bf16 matmuls "
        "(torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction)"),
    "fp16_accumulation": (
        "fp16 accumulation in fp16 matmuls (torch.backends.cuda.matmul.allow_fp16_accumulation)"),
}


class LaunchEntry(BaseModel):
    """One launch of a traced call (launches alike counted together), with its origin."""

    kind: Literal["kernel", "memcpy", "memset"]
    name: str
    demangled: str | None = None
    grid: list[int] | None = None
    block: list[int] | None = None
    stream: int | None = None
    count: int = 1
    device_ms: float = 0.0
    bytes: int | None = None
    origin: Origin
    source: str  # what it is: "cuBLAS", "ATen", "the source's add_kernel"


class ModesSeen(BaseModel):
    """The math modes around one traced call."""

    before: MathModes
    after: MathModes
    # the settings the call made ("matmul_tf32=True"), each once, in the order first made
    set_during_call: list[str] = Field(default_factory=list)
    tf32_kernels: list[str] = Field(default_factory=list)  # names that say they compute in TF32


class Provenance(BaseModel):
    """One side's traced call: what ran, who compiled it, under which math modes."""

    side: Literal["candidate", "reference"]
    observed_by: Literal["kernel_process"] = "kernel_process"
    device: Literal["cuda", "cpu"]
    observed: bool  # the launches were observed (else ``cannot_see`` says why)
    cannot_see: list[str]
    kernels: list[LaunchEntry] = Field(default_factory=list)
    memory_ops: list[LaunchEntry] = Field(default_factory=list)
    left_out: int = 0  # distinct launches beyond those listed
    left_out_ms: float = 0.0
    device_ms: float = 0.0  # all the call's device work, summed (overlaps counted twice)
    device_ms_by_origin: dict[str, float] = Field(default_factory=dict)
    own_share: float | None = None  # of device_ms, in the submission's own kernels
    own_kernels_defined: list[str] = Field(default_factory=list)
    promises_own_code: str | None = None  # why it promises kernels of its own (None: it does not)
    no_own_kernel_ran: bool = False
    reason: str | None = None  # why no_own_kernel_ran, in words
    busy_ms: float | None = None  # the device busy, overlaps counted once
    wall_ms: float | None = None  # the traced call, device-synchronised, on the host's clock
    judged_ms: float | None = None  # the judge's figure for a call, beside busy_ms
    math_modes: ModesSeen
    call_error: str | None = None
    cost_ms: float = 0.0  # what the trace cost the job


class PrecisionParity(BaseModel):
    """Both sides' math modes, each the loosest its traced call ran under (before, after, or
    set during it), and how the candidate's were looser."""

    candidate: MathModes
    reference: MathModes
    candidate_tf32_kernels: int = 0
    reference_tf32_kernels: int = 0
    looser: list[str] = Field(default_factory=list)


class ProvenanceFindings(BaseModel):
    """What :func:`assemble` gives a result: the blocks, and what its integrity report adds."""

    candidate: Provenance | None = None
    reference: Provenance | None = None
    precision_parity: PrecisionParity | None = None
    integrity_reasons: list[str] = Field(default_factory=list)
    checks: list[str] = Field(default_factory=list)


def assemble(candidate: CallTrace | None, candidate_kernel: KernelCode,
             reference: CallTrace | None = None, reference_kernel: KernelCode | None = None,
             candidate_ms: float | None = None,
             reference_ms: float | None = None) -> ProvenanceFindings:
    """The provenance blocks, the precision parity and the integrity reasons of a result.

    ``candidate``/``reference``: the sides' traces (``JudgedTiming.kernel_trace`` of each
    side's ``KernelTimed`` in a comparison; ``SelfTimed.trace`` for /evaluate, which has no
    reference); ``candidate_kernel``/``reference_kernel``: their submitted code;
    ``candidate_ms``/``reference_ms``: the published figures, set beside the traced device
    time. A missing trace leaves its block (and the parity) out.
    """
    found = ProvenanceFindings()
    if candidate is not None:
        found.candidate = provenance("candidate", candidate, candidate_kernel, candidate_ms)
        found.checks.append(PROVENANCE_CHECK)
        if found.candidate.reason is not None:
            found.integrity_reasons.append(f"the candidate {found.candidate.reason}")
    if reference is not None and reference_kernel is not None:
        found.reference = provenance("reference", reference, reference_kernel, reference_ms)
    if candidate is not None and reference is not None:
        found.precision_parity = parity(candidate, reference)
        found.checks.append(PARITY_CHECK)
        if found.precision_parity.looser:
            found.integrity_reasons.append(
                "the candidate ran with looser math modes than its reference: "
                + "; ".join(found.precision_parity.looser))
    return found


def provenance(side: Literal["candidate", "reference"], trace: CallTrace, kernel: KernelCode,
               judged_ms: float | None = None) -> Provenance:
    """One side's block, from its trace and its submitted code."""
    own = own_kernels(kernel)
    entries = [entry(launch, own) for launch in trace.launches]
    kernels = [e for e in entries if e.kind == "kernel"]
    by_origin: dict[str, float] = {}
    for e in entries:
        by_origin[e.origin.value] = by_origin.get(e.origin.value, 0.0) + e.device_ms
    total = sum(by_origin.values()) + trace.left_out_ms
    observed = trace.unobservable is None
    block = Provenance(
        side=side, device=trace.device, observed=observed,
        cannot_see=([trace.unobservable] if trace.unobservable else []) + ALWAYS_UNSEEN,
        kernels=kernels, memory_ops=[e for e in entries if e.kind != "kernel"],
        left_out=trace.left_out, left_out_ms=trace.left_out_ms, device_ms=total,
        device_ms_by_origin=by_origin,
        own_share=by_origin.get(Origin.OWN.value, 0.0) / total if observed and total > 0
        else None,
        own_kernels_defined=own.listed(), promises_own_code=promise(kernel, own),
        busy_ms=trace.device_busy_ms, wall_ms=trace.wall_ms, judged_ms=judged_ms,
        math_modes=ModesSeen(before=trace.modes_before, after=trace.modes_after,
                             set_during_call=list(trace.modes_set),
                             tf32_kernels=tf32_kernels(trace.launches)),
        call_error=trace.call_error, cost_ms=trace.cost_ms)
    if observed and trace.call_error is None and block.promises_own_code is not None \
            and not any(e.origin == Origin.OWN for e in kernels) and trace.left_out == 0:
        block.no_own_kernel_ran = True
        block.reason = no_own_kernel_reason(block.promises_own_code, own, kernels)
    return block


def entry(launch: TracedLaunch, own: OwnKernels) -> LaunchEntry:
    found = classify(launch.name, own, launch.demangled, launch.kind)
    return LaunchEntry(**launch.model_dump(), origin=found.origin, source=found.source)


def promise(kernel: KernelCode, own: OwnKernels) -> str | None:
    """Why ``kernel`` promises kernels of its own (None: it does not)."""
    if kernel.kernel_type in PROMISING_TYPES:
        return f"it is a '{kernel.kernel_type.value}' answer"
    languages = imported_languages(kernel.source_code)
    if languages:
        return f"it is written in {languages[0].title}"
    if own:
        return f"its source defines kernels ({', '.join(own.listed()[:SHOWN_NAMES])})"
    return None


def no_own_kernel_reason(promised: str, own: OwnKernels, kernels: list[LaunchEntry]) -> str:
    """Why a side that promised kernels of its own is flagged: what ran instead."""
    defined = (f"of the kernels its source defines ({', '.join(own.listed()[:SHOWN_NAMES])})"
               if own else "of its own (its source defines none)")
    if not kernels:
        ran = "no kernel ran at all in the traced call"
    else:
        counts: dict[str, int] = {}
        for k in kernels:
            label = f"{k.source} ({k.origin.value})"
            counts[label] = counts.get(label, 0) + k.count
        ran = "the traced call ran only " + ", ".join(
            f"{n} x {label}" for label, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    return f"ran no kernel {defined}, though {promised}: {ran}"


def tf32_kernels(launches: Iterable[TracedLaunch]) -> list[str]:
    """The names of the kernels that say they compute in TF32."""
    return [launch.demangled or launch.name for launch in launches
            if launch.kind == "kernel" and computes_in_tf32(launch.name, launch.demangled)]


def loosest(trace: CallTrace) -> MathModes:
    """The loosest math modes ``trace``'s call ran under: before it, after it, or as set
    during it (a mode switched on for part of the call counts)."""
    modes = MathModes()
    seen = [trace.modes_before, trace.modes_after]
    for flag in LOOSER_FLAGS:
        values = [getattr(m, flag) for m in seen] + set_values(trace.modes_set, flag)
        known = [bool(v) for v in values if v is not None]
        setattr(modes, flag, any(known) if known else None)
    precisions = [m.float32_matmul_precision for m in seen] + \
        set_values(trace.modes_set, "float32_matmul_precision")
    ranked = [p for p in precisions if isinstance(p, str) and p in PRECISION_RANK]
    modes.float32_matmul_precision = max(ranked, key=PRECISION_RANK.__getitem__) \
        if ranked else None
    return modes


def set_values(modes_set: list[str], flag: str) -> list[bool | str | None]:
    """The values ``flag`` was set to during a call (``modes_set`` entries ``flag=value``)."""
    out: list[bool | str | None] = []
    for item in modes_set:
        name, _, value = item.partition("=")
        if name == flag:
            out.append({"True": True, "False": False}.get(value, value))
    return out


def parity(candidate: CallTrace, reference: CallTrace) -> PrecisionParity:
    """Both sides' loosest math modes, and every way the candidate's were looser."""
    mine, theirs = loosest(candidate), loosest(reference)
    mine_tf32, theirs_tf32 = tf32_kernels(candidate.launches), tf32_kernels(reference.launches)
    looser: list[str] = []
    p, q = mine.float32_matmul_precision, theirs.float32_matmul_precision
    precision_looser = p is not None and q is not None and PRECISION_RANK[p] > PRECISION_RANK[q]
    if precision_looser:
        looser.append(f"float32_matmul_precision '{p}' where its reference's was '{q}' "
                      f"(float32 matmuls may compute in {'bf16' if p == 'medium' else 'TF32'})")
    for flag, what in LOOSER_FLAGS.items():
        if flag == "matmul_tf32" and precision_looser:
            continue  # (the same switch, said above)
        if getattr(mine, flag) is True and getattr(theirs, flag) is False:
            looser.append(f"{what} on, where its reference had it off")
    float32 = "float32" in (reference.input_dtypes or candidate.input_dtypes)
    if mine_tf32 and not theirs_tf32 and reference.unobservable is None and float32:
        looser.append(f"{len(mine_tf32)} kernel(s) whose names say they compute in TF32 ran "
                      f"({', '.join(mine_tf32[:SHOWN_NAMES])}), where its reference, on "
                      "float32 inputs, ran none")
    return PrecisionParity(candidate=mine, reference=theirs,
                           candidate_tf32_kernels=len(mine_tf32),
                           reference_tf32_kernels=len(theirs_tf32), looser=looser)
