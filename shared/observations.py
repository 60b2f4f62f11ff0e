"""What a job process observes beside a timing, carried in the messages of
:mod:`shared.protocol`: one more call of the kernel traced by the process that made it
(:class:`CallTrace`: the device work it launched, the math modes it ran under) and the
reference's work on trial 0's inputs as the judge counted it (:class:`ProblemWork`). Also the
messages' base, :class:`Message`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt


class Message(BaseModel):
    """Every message: unknown keys are a protocol violation, numbers are finite."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


# A traced call's record is bounded whatever the call did: at most TRACE_LAUNCHES distinct
# launches listed (the rest counted), names of TRACE_NAME_CHARS (a CUTLASS kernel's demangled
# name runs to thousands), TRACE_MODES_SET distinct settings, TRACE_DTYPES dtypes.
TRACE_LAUNCHES = 200
TRACE_NAME_CHARS = 1000
TRACE_MODES_SET = 32
TRACE_DTYPES = 32


class TracedLaunch(Message):
    """Device work of one kind that one call launched, as CUPTI recorded it in the process that
    made the call: a kernel (``name`` as CUPTI gives it: mangled for a C++ kernel), a memory
    copy (``name`` its direction, e.g. ``DtoD``) or a memory set. Launches alike in kind, name,
    grid, block and stream are counted together; ``device_ms`` and ``bytes`` are their sums."""

    kind: Literal["kernel", "memcpy", "memset"]
    name: str = Field(max_length=TRACE_NAME_CHARS)
    demangled: str | None = Field(default=None, max_length=TRACE_NAME_CHARS)  # of a C++ name
    grid: list[NonNegativeInt] | None = None  # x, y, z
    block: list[NonNegativeInt] | None = None
    stream: NonNegativeInt | None = None
    count: NonNegativeInt = 1
    device_ms: NonNegativeFloat = 0.0
    bytes: NonNegativeInt | None = None


class MathModes(Message):
    """The math modes torch had set in a process at one moment (None: not readable there;
    ``unreadable`` says why, by flag)."""

    matmul_tf32: bool | None = None  # cuBLAS may use TF32 for float32 matmuls
    cudnn_tf32: bool | None = None  # cuDNN may use TF32 for float32 convolutions
    float32_matmul_precision: str | None = None  # "highest", "high" or "medium"
    fp16_reduced_precision_reduction: bool | None = None
    bf16_reduced_precision_reduction: bool | None = None
    fp16_accumulation: bool | None = None  # cuBLAS may accumulate fp16 matmuls in fp16
    unreadable: dict[str, str] = Field(default_factory=dict)


class CallTrace(Message):
    """One more call of the loaded kernel, observed by the process that made it (CUPTI's
    activity API sees only its own process): the device work it launched and the math modes
    it ran under. The kernel owns that process, so this is its report about itself, for
    review beside the judge's figures, never a figure itself (:mod:`profiling.provenance`)."""

    observed_by: Literal["kernel_process"] = "kernel_process"
    device: Literal["cuda", "cpu"]
    # why the launches could not be observed (then ``launches`` says nothing); None: traced
    unobservable: str | None = None
    launches: list[TracedLaunch] = Field(default_factory=list, max_length=TRACE_LAUNCHES)
    # distinct launches beyond those listed, and their device time (ms)
    left_out: NonNegativeInt = 0
    left_out_ms: NonNegativeFloat = 0.0
    device_busy_ms: NonNegativeFloat | None = None  # the union of the launches' intervals
    wall_ms: NonNegativeFloat | None = None  # the traced call, device-synchronised
    call_error: str | None = None  # the traced call raised (what it launched is still listed)
    modes_before: MathModes = Field(default_factory=MathModes)
    modes_after: MathModes = Field(default_factory=MathModes)
    # the math modes the call itself set, as MathModes fields, each setting once in the order
    # first made ("matmul_tf32=True")
    modes_set: list[str] = Field(default_factory=list, max_length=TRACE_MODES_SET)
    # the distinct dtypes of the tensors the call reads
    input_dtypes: list[str] = Field(default_factory=list, max_length=TRACE_DTYPES)
    cost_ms: NonNegativeFloat = 0.0  # what the observation cost the job (host wall time)



class ProblemWork(Message):
    """The reference's work on trial 0's inputs, as the judge counted it (:mod:`judge.flops`):
    what a roofline bound of the problem is made from (:mod:`profiling.sol`).

    ``flops`` is what ``torch.utils.flop_counter.FlopCounterMode`` counts over one call
    (matmuls, convolutions, attention: elementwise and reduction ops count 0), None where it
    was not counted (``reason`` says why); ``flops_by_dtype`` splits it by the dtype the ops
    ran in (``profiling.gpu_peaks.DTYPES`` keys, ``tf32`` for float32 matmuls torch lets use
    TF32). ``dtype`` is the one with the most FLOPs (``dtype_source`` "counted"), else the one
    most of the inputs' bytes are in ("inputs"). Bytes are what the call must move at least:
    each tensor it reads (inputs, inouts, and the reference module's parameters and buffers,
    which ``state_bytes`` counts apart) and writes (its outputs), once.
    """

    flops: NonNegativeInt | None = None
    flops_by_dtype: dict[str, NonNegativeInt] = Field(default_factory=dict)
    dtype: str | None = None
    dtype_source: Literal["counted", "inputs"] | None = None
    read_bytes: NonNegativeInt = 0
    written_bytes: NonNegativeInt = 0
    state_bytes: NonNegativeInt = 0
    reason: str | None = None
    count_ms: NonNegativeFloat = 0.0  # the counting call's wall time

    @property
    def moved_bytes(self) -> int:
        """Bytes read and written."""
        return self.read_bytes + self.written_bytes


__all__ = ["TRACE_DTYPES", "TRACE_LAUNCHES", "TRACE_MODES_SET", "TRACE_NAME_CHARS", "CallTrace",
           "MathModes", "Message", "ProblemWork", "TracedLaunch"]
