"""Messages between the server and the job processes: one pydantic model per operation.

Three channels carry them (each a :class:`shared.channel.Channel`: frames of JSON with file
descriptors beside)::

    server ──job channel──► judge             Load, Pair, Calibrate, Trials, PrepareSamples,
      │                       │               TimeKernel, Robustness, Audit, Unpair, Exit
      │                  pair channel         the judge drives the kernel's process here:
      │                       ▼               MapArena, Call, WarmUp, Extras, Unpair
      └──job channel──► kernel process        Load, Pair, RunOnce, TimeSelf, Exit

A request is one model of :data:`ServerRequest` or :data:`PairRequest` (discriminated by
``op``); every answer is one model of :data:`Reply` (discriminated by ``kind``): the reply the
request expects, :class:`Failure` (the kernel's own failure, a compile or runtime error: data,
not a fault) or :class:`InternalError` (the harness's own fault).

What a process that imported user code sends is data from an untrusted process: the judge
times it with its own clock, and the server derives every verdict itself. The
server's own observations (its wall clock, a remeasurement, the GPU's state) are never
written into a worker's report: they are arguments of the server's judgement.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field, NonNegativeFloat, NonNegativeInt, TypeAdapter

from shared.models import Outcome, RobustnessReport, WorkerJob
from shared.observations import (
    CallTrace,
    Message,
    ProblemWork,
)


class Role(str, Enum):
    """What a job process is for (said once, in :class:`Load`)."""

    JUDGE = "judge"  # the reference, and the checker and clock of a comparison
    KERNEL = "kernel"  # the kernel under test (/evaluate, /validate, a comparison's candidate)
    BUILD = "build"  # the CPU build stage: load_inline through the build cache, nothing else


# ---- what travels inside the messages -------------------------------------------------------


class TensorMeta(Message):
    dtype: str
    shape: list[NonNegativeInt]


class Slot(Message):
    """One tensor's place in an arena: ``nbytes`` bytes at ``offset``."""

    dtype: str
    shape: list[NonNegativeInt]
    offset: NonNegativeInt
    nbytes: NonNegativeInt


class ArenaLayout(Message):
    """The memory a judge and a kernel process both map (see :mod:`harness.arena`).

    ``inputs`` are written by the judge when a call starts; ``outputs`` by the kernel's
    process before it answers. ``values`` describes the reference's input values in call
    order: ``{"tensor": i}`` for ``inputs[i]``, ``{"value": v}`` for a number, string or None,
    ``{"list": [...]}``/``{"tuple": [...]}``, ``{"dtype": name}``.
    """

    size: NonNegativeInt
    where: Literal["device", "host"]
    inputs: list[Slot]
    outputs: list[Slot]
    values: list[Any]


class Resources(Message):
    """Memory a process used (bytes). Exported memory lies outside torch's allocator."""

    peak_memory_bytes: NonNegativeInt = 0
    peak_shared_bytes: NonNegativeInt = 0
    device_free_bytes: NonNegativeInt | None = None
    device_total_bytes: NonNegativeInt | None = None


class BuildRecord(Message):
    name: str
    cached: bool
    seconds: NonNegativeFloat


class TimingReport(Message):
    """Raw samples of one in-process timing run (:mod:`harness.timer`); statistics are the
    server's (:mod:`profiling.integrity`)."""

    method: str
    event_ms: list[NonNegativeFloat]
    host_sync_ms: list[NonNegativeFloat] = Field(default_factory=list)
    device_busy_ms: NonNegativeFloat | None = None
    device_busy_error: str | None = None
    device_busy_calls: NonNegativeInt = 0
    warmup_calls: NonNegativeInt = 0
    warmup_ms: NonNegativeFloat = 0.0
    warmup_reason: str | None = None  # why it was shorter than usual (a quick answer)
    sample_rule: Literal["adaptive", "fixed"] = "fixed"
    stopped_by: str = "count"
    sampling_ms: NonNegativeFloat = 0.0
    back_to_back_ms: NonNegativeFloat | None = None
    back_to_back_calls: NonNegativeInt = 0
    back_to_back_round_ms: list[NonNegativeFloat] = Field(default_factory=list)
    back_to_back_reason: str | None = None
    graph_ms_per_call: NonNegativeFloat | None = None
    graph_calls_per_replay: NonNegativeInt = 0
    graph_replay_ms: list[NonNegativeFloat] = Field(default_factory=list)
    graph_reason: str | None = None
    # samples that started from freshly made inputs (the rest reused an earlier sample's)
    fresh_inputs: NonNegativeInt = 0
    inputs_note: str | None = None
    # where the run's wall time went, by part (warm_up, rest, samples, host_sync, activity,
    # back_to_back, graph; a judged run adds inputs, nulls, keep), ms: the job's cost, not
    # the kernel's
    spent_ms: dict[str, NonNegativeFloat] = Field(default_factory=dict)
    # the timer's own reading of no work (its events around nothing), taken just after the
    # warm-up: the server subtracts it from each sample (at most 5 us), ms
    event_zero_ms: NonNegativeFloat = 0.0
    # (GPU) the host's time enqueueing each sample's call while its stream was held, and the
    # same for calls of no work (the timer's own steps): the call's launch, as the judge
    # allows it a candidate; and device-synchronised host intervals around no work, the
    # host_sync figure's own cost. The server's host-bound rule reads them (ms)
    enqueue_ms: list[NonNegativeFloat] = Field(default_factory=list)
    null_enqueue_ms: list[NonNegativeFloat] = Field(default_factory=list)
    null_host_ms: list[NonNegativeFloat] = Field(default_factory=list)


class JudgedTiming(Message):
    """A timing as the judge measured it (:mod:`judge.clock`): a candidate's, or the
    reference's, by the one procedure of :mod:`harness.handover`.

    ``trusted_ms`` is the judge's interval per timed sample, from before the sample's inputs
    reached the arena until its outputs were in the judge's own memory; ``calibration_ms`` the
    same interval for the harness's null call (the same inputs and outputs handed over, no
    call), measured before the partner loaded any code; ``null_ms`` null calls between the
    samples. The server subtracts the null call's cost (:func:`profiling.integrity.judge`).
    """

    clock: Literal["cuda_events", "perf_counter"]
    trusted_ms: list[NonNegativeFloat]
    calibration_ms: list[NonNegativeFloat]
    null_ms: list[NonNegativeFloat] = Field(default_factory=list)
    warmup_calls: NonNegativeInt = 0
    warmup_ms: NonNegativeFloat = 0.0
    warmup_reason: str | None = None
    sample_rule: Literal["adaptive", "fixed"] = "fixed"
    stopped_by: str = "count"
    sampling_ms: NonNegativeFloat = 0.0
    fresh_inputs: NonNegativeInt = 0
    inputs_note: str | None = None
    # where the run's wall time went (warm_up, inputs, samples, nulls, keep, extras), ms
    spent_ms: dict[str, NonNegativeFloat] = Field(default_factory=dict)
    # samples whose gate the judge opened before the kernel's process said the call was
    # enqueued (the call waits for the device from inside): their intervals hold host time
    released_early: NonNegativeInt = 0
    # why the run ended before its rule said stop (its time budget spent, calls slowing down
    # from one to the next); None when it did not
    cut_short: str | None = None
    # the kernel's process's own figures beside the samples (CUDA graph, back to back):
    # shown as that process's report, never as the number
    kernel_reported: TimingReport | None = None
    # one more call, traced by the kernel's process after the samples (its own report, like
    # kernel_reported): what it launched and the math modes it ran under; None where the run
    # had no time left for it
    kernel_trace: CallTrace | None = None
    # taken beside another timing, sample for sample in turn (TimeKernel.beside): the
    # reference's and the candidate's of one comparison
    interleaved: bool = False


class Startup(Message):
    fork_sandbox_ms: float = 0.0
    context_ms: float = 0.0
    timer_ms: float = 0.0
    rehearsal_ms: float = 0.0


# ---- requests from the server ----------------------------------------------------------------


# the job process's JIT caches, all in one directory (the worker pool sets it)
JIT_DIR_ENV = "KES_JIT_DIR"
# where a job process writes the sources it loads. Where the worker's /tmp is its own, both
# are at fixed paths under it, the same in every worker: JIT compilers record paths (Triton's
# cache groups hold absolute paths; CuTe DSL's module hash covers source locations), so a
# restored cache is found only at the path it was made at.
WORK_DIR_ENV = "KES_WORK_DIR"
# What a GPU worker warms before its job, beside its CUDA context (orchestration.worker_pool
# picks it from the job's source): "cublas" (the allocator, the RNG, first elementwise
# kernels in fp32, fp16 and bf16, and cuBLAS's paths in each), "base" (the same without
# cuBLAS) or "none" (the context alone).
SPARE_WARM_ENV = "KES_SPARE_WARM"
WARM_CUBLAS, WARM_BASE, WARM_NONE = "cublas", "base", "none"
# Which of the harness's paths a worker rehearses before it says it is ready
# (subprocess_worker.rehearse; orchestration.worker_kinds picks it from the job that will take
# it): "all" (a comparison's judge and its paired kernel, and a kernel alone) or "alone" (a
# kernel alone, the path of /evaluate and /validate: a lighter start and exit).
REHEARSE_ENV = "KES_REHEARSE"
REHEARSE_ALL, REHEARSE_ALONE = "all", "alone"
# "1" in a build process (the build stage's: it runs compilers and times nothing), which keeps
# the host's cores and threads where a CPU-mode job process is held to its own
BUILD_PROCESS_ENV = "KES_BUILD_PROCESS"
PRIVATE_TMP_ROOT = "/tmp/kes-job"


class Load(Message):
    op: Literal["load"] = "load"
    job: WorkerJob
    role: Role
    # one descriptor comes with the message: a tar of the JIT caches an earlier job of this
    # same source left (the server's store, orchestration/jit_store.py), restored first
    jit_seed: bool = False


class ExportJit(Message):
    """After the job: count what the source's JIT compilers added to the caches, and (``send``,
    with a pipe's write end as the one descriptor) write the caches to it as a tar."""

    op: Literal["export_jit"] = "export_jit"
    send: bool = False


class Exit(Message):
    op: Literal["exit"] = "exit"


class RunOnce(Message):
    """The kernel on its own inputs, once (/evaluate, /validate)."""

    op: Literal["run_once"] = "run_once"


class TimeSelf(Message):
    """/evaluate's timing, in the kernel's own process (there is no reference to judge by)."""

    op: Literal["time_self"] = "time_self"
    num_trials: int | None = None


class Pair(Message):
    """The descriptor beside this message is one end of a socket pair; the kernel's process
    gets the other (and may get this before its :class:`Load`). To the judge: ``secret`` seeds
    every input after trial 0 of this pairing (never sent to the kernel's process)."""

    op: Literal["pair"] = "pair"
    role: Role
    secret: int | None = None
    # to the judge: the comparison this pairing is for (its tolerances, the candidate's
    # IOContract); a judge serves many comparisons of one reference
    job: WorkerJob | None = None
    # to the judge: this pairing's number among the judge's pairings (0: none), which a later
    # Calibrate names in ``free`` once this pairing's kernel's process is gone
    pairing: NonNegativeInt = 0
    # to the kernel's process, before any user code: from now on, for good, every thread of
    # it and of its children is held to these cores and runs only when no other thread wants
    # them (the candidate's, where its timing will take the reference's samples in turn with
    # its own on one core: whatever it runs between its calls cannot take their time)
    yield_cores: list[NonNegativeInt] | None = None
    # to the judge: a second partner beside the one paired now, the reference's own timed
    # process, whose calls the candidate's timing takes in turn with its own (its pairing ends
    # with an Unpair that says ``beside``; Calibrate and TimeKernel name it the same way)
    beside: bool = False


class Calibrate(Message):
    """The judge maps an arena with its partner and measures the null call (before the
    partner has loaded any user code).

    With ``kept`` the judge measures nothing: it answers with the null call it measured in an
    earlier pairing of the same layout (``Calibrated.kept``), or, holding none, with no
    figures (``kept`` false), and the server then asks for a measurement on a settled
    device."""

    op: Literal["calibrate"] = "calibrate"
    kept: bool = False
    # earlier pairings of this judge whose kernel's process is gone with everything it
    # started (its pid namespace empty: nothing maps their arenas any more, on the host or the
    # GPU): the judge may map the arena it kept from one of them again, zeroed, instead of
    # making a new one
    free: list[NonNegativeInt] = Field(default_factory=list)
    # the partner paired beside (Pair.beside): an arena of its own, its own null call
    beside: bool = False


class Trials(Message):
    """Correctness trials ``first`` .. ``first + count - 1`` (a recheck after timing is one
    more)."""

    op: Literal["trials"] = "trials"
    first: NonNegativeInt
    count: NonNegativeInt
    recheck: bool = False


class PrepareSamples(Message):
    """Before the candidate's timing, while the GPU may still be settling: the judge makes the
    first timed samples' inputs from the secret (as many as ``num_trials`` asks, or the
    adaptive rule's least, within a memory budget) and their fingerprints, so the timing run
    itself only copies them. Answered with :class:`Done`."""

    op: Literal["prepare_samples"] = "prepare_samples"
    num_trials: int | None = None


class TimeKernel(Message):
    op: Literal["time_kernel"] = "time_kernel"
    num_trials: int | None = None
    # the reference's figure (0: none yet, the reference's own timing): it sizes the audit
    reference_ms: NonNegativeFloat = 0.0
    # take each sample of the partner paired beside (the reference's process) in turn with the
    # candidate's, on the same inputs (KernelTimed.beside): a host-bound call's figure moves
    # with the host's speed from one second to the next, and the two readings meet the same host
    beside: bool = False


class Robustness(Message):
    """After the recheck, where the request asks for it: the candidate checked again on
    inputs at other scales, distributions and the shapes the problem declares
    (:mod:`judge.robustness`), its calls numbered from ``first`` as correctness trials are.
    Answered with :class:`RobustnessChecked`."""

    op: Literal["robustness"] = "robustness"
    first: NonNegativeInt


class Audit(Message):
    op: Literal["audit"] = "audit"


class Unpair(Message):
    """The pairing is over: drop the partner's channel and the arena (``beside``: only those
    of the partner paired beside). ``keep_samples``: the inputs its first reading was timed
    on are kept for the same job's next pairing, whose :class:`PrepareSamples` takes them
    (the reference's timing, then its candidate's: one set of inputs for both)."""

    op: Literal["unpair"] = "unpair"
    beside: bool = False
    keep_samples: bool = False


ServerRequest = Annotated[
    Load | Exit | RunOnce | TimeSelf | Pair | Calibrate | Trials | PrepareSamples | TimeKernel
    | Robustness | Audit | Unpair | ExportJit,
    Field(discriminator="op"),
]


# ---- requests from the judge to the kernel's process (pair channel) --------------------------


class MapArena(Message):
    op: Literal["map_arena"] = "map_arena"
    layout: ArenaLayout


class CallPurpose(str, Enum):
    CALIBRATE = "calibrate"  # the harness's null call: handed over as a sample, no call
    TRIAL = "trial"  # a correctness trial: output buffers poisoned first
    SAMPLE = "sample"  # a timed sample, handed over on the judge's clock


class Call(Message):
    op: Literal["call"] = "call"
    purpose: CallPurpose
    index: NonNegativeInt
    # a sample's or null call's number in the hand-over (harness.handover), from 1
    seq: NonNegativeInt = 0


class WarmUp(Message):
    op: Literal["warm_up"] = "warm_up"
    quick: bool = False  # the fewest calls only (a quick answer: harness.timer.few)
    # the cores the process holds its threads to until its timing run's Extras (GPU mode)
    cores: list[NonNegativeInt] | None = None
    # another timed process holds the same cores (a reading beside: judge.beside): between
    # calls this one waits for the judge asleep, not polling, which would take the core's
    # time from the other's calls
    shares_cores: bool = False


class Extras(Message):
    """The end of a timing run: the kernel's process puts its module's state back as the
    trials left it, after taking its own figures beside the samples (back-to-back and
    CUDA-graph figures) where ``figures`` asks for them, and tracing one more call where
    ``trace`` does."""

    op: Literal["extras"] = "extras"
    median_ms: NonNegativeFloat
    samples: NonNegativeInt
    num_trials: int | None = None
    figures: bool = True
    trace: bool = False  # and trace one more call (:class:`CallTrace`)


PairRequest = Annotated[
    MapArena | Call | WarmUp | Extras | Unpair,
    Field(discriminator="op"),
]


# ---- replies ---------------------------------------------------------------------------------


class Ready(Message):
    kind: Literal["ready"] = "ready"
    pid: int
    startup: Startup


class Loaded(Message):
    kind: Literal["loaded"] = "loaded"
    artifacts: dict[str, str] = Field(default_factory=dict)
    builds: list[BuildRecord] = Field(default_factory=list)
    deferred: str | None = None  # the build stage left this source to the GPU stage


class JitExported(Message):
    """What the job's JIT caches hold: ``files`` in all, ``added`` beyond what was restored
    (0 after a restore: the source compiled nothing), ``sent`` bytes written to the pipe."""

    kind: Literal["jit_exported"] = "jit_exported"
    files: int
    added: int
    sent: int = 0
    added_names: list[str] = Field(default_factory=list)  # the first few, relative paths


class Done(Message):
    """An operation with nothing to report."""

    kind: Literal["done"] = "done"


class RanOnce(Message):
    kind: Literal["ran_once"] = "ran_once"
    outputs: list[TensorMeta]
    input_bytes: NonNegativeInt
    output_bytes: NonNegativeInt
    resources: Resources


class SelfTimed(Message):
    kind: Literal["self_timed"] = "self_timed"
    timing: TimingReport
    resources: Resources
    trace: CallTrace | None = None  # one more call, traced after the timing


class Calibrated(Message):
    kind: Literal["calibrated"] = "calibrated"
    arena_bytes: NonNegativeInt
    where: Literal["device", "host"]
    null_call_ms: list[NonNegativeFloat]
    # the figures are those of an earlier pairing of this judge (Calibrate.kept)
    kept: bool = False
    # the arena is one the judge kept from a pairing the server named free (Calibrate.free)
    arena_reused: bool = False


class TrialsPassed(Message):
    kind: Literal["trials_passed"] = "trials_passed"
    ran: NonNegativeInt
    input_bytes: NonNegativeInt
    output_bytes: NonNegativeInt
    reference_resources: Resources
    # the reference writes its own inputs, so the kernel's inputs were not checked unchanged
    reference_mutates: bool = False
    # the judge's wall time by step (inputs, reference, call, check), ms
    spent_ms: dict[str, NonNegativeFloat] = Field(default_factory=dict)


class Incorrect(Message):
    """The judge's verdict: the kernel's outputs of ``trial`` are wrong (``problem`` says how)."""

    kind: Literal["incorrect"] = "incorrect"
    trial: NonNegativeInt
    problem: str
    recheck: bool = False
    # what the trials so far held: the problem's bytes, the kernel's peak (as for a pass)
    input_bytes: NonNegativeInt = 0
    output_bytes: NonNegativeInt = 0
    kernel_resources: Resources = Field(default_factory=Resources)


class RobustnessChecked(Message):
    """The robustness cases, each passed, failed or skipped (a kernel that fails or dies in
    one fails that case, and the cases after a death are skipped: never the comparison)."""

    kind: Literal["robustness_checked"] = "robustness_checked"
    report: RobustnessReport


class PartnerFailed(Message):
    """The kernel's process answered a call of the judge's with its kernel's failure."""

    kind: Literal["partner_failed"] = "partner_failed"
    failure: Failure
    during: str


class PartnerGone(Message):
    """The kernel's process closed the pair channel (it died) or broke its protocol."""

    kind: Literal["partner_gone"] = "partner_gone"
    during: str
    broke_protocol: str | None = None


class KernelTimed(Message):
    kind: Literal["kernel_timed"] = "kernel_timed"
    timing: JudgedTiming
    resources: Resources
    # the problem's size, as the reference's trial 0 made it
    input_bytes: NonNegativeInt = 0
    output_bytes: NonNegativeInt = 0
    # the reference's FLOPs and bytes on trial 0's inputs (judge.flops)
    work: ProblemWork | None = None
    # the reference's timing taken beside the candidate's (TimeKernel.beside)
    beside: JudgedTiming | None = None


class Audited(Message):
    """The judge's check of timed samples it kept (picked after they ran)."""

    kind: Literal["audited"] = "audited"
    checked: list[NonNegativeInt] = Field(default_factory=list)  # sample indices compared
    samples: NonNegativeInt = 0
    problem: str | None = None  # of the first sample that was wrong
    wrong_sample: int | None = None
    skipped: str | None = None  # why none could be compared
    expected: bool = False  # the skip follows from the reference (not reproducible, stateful)
    # the judge's wall time by step (inputs, reference, check), ms
    spent_ms: dict[str, NonNegativeFloat] = Field(default_factory=dict)


class ArenaMapped(Message):
    kind: Literal["arena_mapped"] = "arena_mapped"


class CallDone(Message):
    """A kernel call handed over: its outputs described, copied into the arena when they
    fit (a timed call on a GPU: enqueued, the hand-over's words say when it ran)."""

    kind: Literal["call_done"] = "call_done"
    index: NonNegativeInt
    outputs: list[TensorMeta]
    copied: bool
    output_bytes: NonNegativeInt = 0
    peak_memory_bytes: NonNegativeInt = 0


class WarmedUp(Message):
    kind: Literal["warmed_up"] = "warmed_up"
    calls: NonNegativeInt
    ms: NonNegativeFloat


class ExtraFigures(Message):
    kind: Literal["extra_figures"] = "extra_figures"
    report: TimingReport  # event_ms empty: the samples are the judge's
    trace: CallTrace | None = None  # where Extras.trace asked for it


class Failure(Message):
    """The kernel failed (its fault, reported to the user): compile or runtime error."""

    kind: Literal["failure"] = "failure"
    outcome: Literal[Outcome.COMPILE_ERROR, Outcome.RUNTIME_ERROR]
    message: str
    out_of_memory: bool = False  # it failed for want of GPU memory (the job may run again)


class InternalError(Message):
    """The harness failed (a fault of the server's own code, or a kernel that broke it)."""

    kind: Literal["internal_error"] = "internal_error"
    message: str


Reply = Annotated[
    Ready | Loaded | JitExported | Done | RanOnce | SelfTimed | Calibrated | TrialsPassed | Incorrect | RobustnessChecked | PartnerFailed | PartnerGone | KernelTimed | Audited | ArenaMapped | CallDone | WarmedUp | ExtraFigures | Failure | InternalError,
    Field(discriminator="kind"),
]

PartnerFailed.model_rebuild()

SERVER_REQUESTS: TypeAdapter[ServerRequest] = TypeAdapter(ServerRequest)
PAIR_REQUESTS: TypeAdapter[PairRequest] = TypeAdapter(PairRequest)
REPLIES: TypeAdapter[Reply] = TypeAdapter(Reply)

R = TypeVar("R", bound=Message)


# ---- the zygote's and the sandbox's own channels (trusted: no user code runs there) ----------


class Spawn(Message):
    """Fork one worker (the zygote answers :class:`Spawned` with three descriptors)."""

    op: Literal["spawn"] = "spawn"
    scratch: str
    hidden: list[str]
    writable: list[str]
    readable: list[str]
    masked: list[str] = Field(default_factory=list)  # files that read as /dev/null
    background: bool = False  # the lowest CPU priority, for good (the build stage)
    uid: int
    network: bool
    env: dict[str, str]
    scratch_mb: int
    requested_at: float


class Spawned(Message):
    kind: Literal["spawned"] = "spawned"
    outer_pid: int


class ZygoteReady(Message):
    kind: Literal["zygote_ready"] = "zygote_ready"
    isolation: str
    detail: str
    task_limit: int | None


class Started(Message):
    """The sandbox's outer process: the job process is running as ``pid``."""

    kind: Literal["started"] = "started"
    pid: int


class Exited(Message):
    """The sandbox's outer process: the job process ended with this wait status, having used
    at most ``max_rss_bytes`` of host memory (its processes together, as ``wait4`` saw)."""

    kind: Literal["exited"] = "exited"
    status: int
    max_rss_bytes: int = 0


HostRequest = Annotated[Spawn | Exit, Field(discriminator="op")]
HostReply = Annotated[Spawned | ZygoteReady | Started | Exited | InternalError,
                      Field(discriminator="kind")]
HOST_REQUESTS: TypeAdapter[HostRequest] = TypeAdapter(HostRequest)
HOST_REPLIES: TypeAdapter[HostReply] = TypeAdapter(HostReply)
