"""/compare (and each candidate of /compare/batch): a candidate judged against a reference.

Two processes: the **judge** (:mod:`judge.session`), which loads the reference and never the
candidate, and the **kernel's process** (:mod:`kernel_side.session`), which loads the
candidate. The server pairs them (a socket pair, and an arena the judge maps for both) and
the judge does the rest with its own clock and its own copies; the flow returns what the
judge found as facts (:mod:`orchestration.facts`), which :mod:`orchestration.verdicts` makes
the verdict. In order:

1. a judge with the reference loaded (kept from an earlier comparison of the same reference
   on this device, or new), and the reference's figure: taken once per reference and GPU
   type, before any candidate's code exists in any process, shared with every comparison that
   wants it (:mod:`orchestration.references`, :mod:`orchestration.ref_cache`). It is taken
   as a candidate's is (:func:`_time_reference`): a fresh process loads the reference's
   source and the judge times it by its clock, so both figures come from one procedure;
2. a fresh process for the candidate, paired with the judge under a secret the candidate never
   sees; the judge maps the arena and calibrates its clock on the harness's null call, all
   before the candidate's source is imported (or, where the judge measured that null call in
   an earlier pairing of the same layout less than ``KEEP_CALIBRATION_S`` ago, or in this
   job's own timing of the reference, with a partner made alike, reuses that figure:
   :func:`_calibrated`);
3. the candidate loaded; correctness trials (trial 0 on the request's seeds, the rest on the
   secret's), each checked by the judge;
4. timing: every sample on fresh secret inputs (the first ones made before the GPU is
   settled for it; where this job timed the reference, the very inputs the reference's first
   reading was timed on, its process gone by then), on the judge's clock
   (:func:`profiling.integrity.judge`), one reading.
   Where the reference's reading was host-bound (its calls wait for the device from inside),
   a fresh process of the reference is paired beside the candidate's and the two are timed
   in turn, sample for sample (:mod:`judge.beside`): that reading of the reference is the
   comparison's figure, and the speedup the median of the per-sample ratios; the
   candidate's process then yields the timing core from its pairing on
   (``Pair.yield_cores``);
5. one more trial on fresh inputs in the same buffers, and where the request asks for them,
   the robustness cases (:mod:`judge.robustness`: the verdict stays the trials'); then the
   kernel's process is done with, and killed at once (its CUDA context's teardown, which the
   next timing on the device waits for, runs beside the rest), and the judge audits the
   samples it kept, picked after they ran, from its own copies.
"""

from __future__ import annotations

import logging
import secrets
import socket
import time
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from orchestration.facts import (
    Compared,
    Failed,
    Held,
    Judged,
    KernelProcess,
    ProcessSetup,
    Reference,
    SampleWrong,
    Timed,
    Where,
    Wrong,
)
from orchestration.flows import jit
from orchestration.flows.timing import disturbed, measured, twice
from orchestration.job_step import Side, Stage
from orchestration.placement import KernelFailed, Observed, Seat
from orchestration.ref_cache import Figure, ReferenceFigures, reference_key
from orchestration.references import Calibration, Judge, Judges
from orchestration.worker import Worker, WorkerDied
from orchestration.worker_kinds import Needs, uses_streams
from profiling import integrity
from profiling.integrity import ImplausibleReport, TimingVerdict
from shared.models import JudgeCalibration, Outcome, WorkerJob
from shared.protocol import (
    Audit,
    Audited,
    Calibrate,
    Calibrated,
    Done,
    Failure,
    Incorrect,
    KernelTimed,
    Message,
    Pair,
    PartnerFailed,
    PartnerGone,
    PrepareSamples,
    Robustness,
    RobustnessChecked,
    Role,
    TimeKernel,
    Trials,
    TrialsPassed,
    Unpair,
)

# On the CPU the hand-over's cost depends on which cores the two processes are held to (the
# same one or two), so a calibration serves only the pairing it was measured with
CPU_UNKEPT = "on the CPU a calibration serves only its own partner's pairing"
log = logging.getLogger(__name__)
M = TypeVar("M", bound=Message)
# What the judge may answer to a request that involves the kernel's process.
WITH_PARTNER = (PartnerFailed, PartnerGone, Failure)


class References(Protocol):
    """What the flow needs of the reference side (see :mod:`orchestration.references`)."""

    judges: Judges
    figures: ReferenceFigures
    review_threshold: float


@dataclass
class ReferenceSide:
    judges: Judges
    figures: ReferenceFigures
    review_threshold: float


class _ReferenceFailed(Exception):
    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message[:200])
        self.failure = failure


async def compare(job: WorkerJob, seat: Seat, refs: References) -> Compared | Failed:
    key = reference_key(job, seat.gpu_type)
    if not job.reuse_reference:
        key = f"{key}-{job.batch_id or job.job_id}"
    await seat.progress("compiling the reference", 0.1)
    try:
        judge = await refs.judges.lease(job, key, seat)
    except KernelFailed as failed:
        seat.clock.lap("compile")
        return Failed(Side.REFERENCE, failed.failure)
    seat.clock.lap("compile")
    keep = False
    try:
        facts, healthy = await _judged(job, seat, refs, judge, key)
        # kept for the next candidate only where one may come (a shared reference)
        keep = healthy and (job.reuse_reference or job.batch_id is not None)
        return facts
    finally:
        refs.judges.give_back(judge, seat, keep)


async def _judged(job: WorkerJob, seat: Seat, refs: References, judge: Judge,
                  key: str) -> tuple[Compared | Failed, bool]:
    """The comparison with a judge in hand: (what it found, whether the judge may be kept)."""
    try:
        ref_verdict, figure, reused = await _reference_figure(job, seat, refs, judge, key)
    except KernelFailed as failed:
        return Failed(Side.REFERENCE, failed.failure), False
    reference = Reference(
        process=KernelProcess(Where.of(job, seat), judge.loaded.artifacts,
                              ProcessSetup.of(judge.worker)),
        verdict=ref_verdict, figure=figure, reused=reused)
    kernel = await seat.take("custom kernel", Needs.of(job.kernel.source_code))
    candidate: Judged | Wrong | SampleWrong | Failed
    try:
        candidate = await _candidate(job, seat, judge, kernel, ref_verdict,
                                     refs.review_threshold)
    except _ReferenceFailed as failed:
        return Failed(Side.REFERENCE, failed.failure), False
    except KernelFailed as failed:
        seat.clock.lap(seat.step.stage.lap)
        candidate = Failed(failed.side, failed.failure)
    healthy = await _unpaired(seat, judge.worker)
    if isinstance(candidate, Judged) and candidate.beside is not None:
        reference = _timed_beside(job, seat, reference, candidate)
    return Compared(reference, candidate), healthy


def _timed_beside(job: WorkerJob, seat: Seat, reference: Reference,
                  candidate: Judged) -> Reference:
    """The comparison's reference, its figure the reading taken beside the candidate's (the
    reference's process's own report and traced call kept from its own reading), and the
    two readings' samples pair by pair, which the speedup is taken from."""
    assert candidate.beside is not None
    own = reference.figure.timed.timing
    timing = candidate.beside.model_copy(update={"kernel_reported": own.kernel_reported,
                                                 "kernel_trace": own.kernel_trace})
    timed = reference.figure.timed.model_copy(update={"timing": timing})
    try:
        verdict = integrity.judge(timing, job.num_trials, seat.device)
    except ImplausibleReport as exc:  # (the judge's own record: never the kernel's doing)
        log.warning("job %s: the reference's reading beside the candidate's does not add up "
                    "(%s); its own reading stands", job.job_id, exc)
        return reference
    return Reference(process=reference.process, verdict=verdict,
                     figure=Figure(timed=timed, timed_by_job=job.job_id,
                                   gpu_state=candidate.timed.gpu_state),
                     reused=False, paired=None if candidate.pairs is None else replace(
                         candidate.pairs, beside_ms=verdict.stats.median,
                         own_ms=reference.verdict.stats.median))


async def _reference_figure(job: WorkerJob, seat: Seat, refs: References, judge: Judge,
                            key: str) -> tuple[TimingVerdict, Figure, bool]:
    """The reference's timing verdict, its figure, and whether another job took it."""

    async def measure() -> tuple[Figure, bool]:
        await seat.progress("timing the reference", 0.2)
        timed, verdict, seen = await _time_reference(job, seat, judge)
        seat.clock.lap("timing")
        return Figure(timed=timed, timed_by_job=job.job_id, gpu_state=seen.gpu_state), \
            verdict.clean

    async with seat.holding_spares():
        found = await refs.figures.get(key, measure, reuse=job.reuse_reference,
                                       batch=job.batch_id)
    verdict = integrity.judge(found.figure.timed.timing, job.num_trials, seat.device)
    return verdict, found.figure, found.reused


async def _time_reference(job: WorkerJob, seat: Seat, judging: Judge
                          ) -> tuple[KernelTimed, TimingVerdict, Observed]:
    """The reference timed by the procedure a candidate is: a fresh process loads the
    reference's source, is paired with the judge and handed the same secret inputs; the judge
    times it by its clock. A reading the judge found disturbed, and on the CPU every first
    reading, is taken once more and the faster kept (the reference's, never a candidate's: a
    second chance for a baseline only makes the candidates' speedups smaller)."""
    assert job.ref_kernel is not None
    source = job.ref_kernel.source_code
    partner = await seat.take("reference (timed)", Needs.of(source))
    try:
        await _pair(seat, job, judging, partner)
        await _calibrated(seat, job, judging, uses_streams(source))
        await jit.load(seat, partner, Side.REFERENCE, job.model_copy(update={"kernel": job.ref_kernel}))
        _settled(await seat.call(judging.worker, Side.REFERENCE, Stage.TIMING,
                                 PrepareSamples(num_trials=job.num_trials),
                                 (Done, *WITH_PARTNER)), seat, Done, Side.REFERENCE)

        def judged(reply: Message, remeasured: str | None) -> TimingVerdict:
            timed = _settled(reply, seat, KernelTimed, Side.REFERENCE)
            return integrity.judge(timed.timing, job.num_trials, seat.device, remeasured)

        reply, verdict, seen = await measured(
            seat, judging.worker, Side.REFERENCE, TimeKernel(num_trials=job.num_trials),
            (KernelTimed, *WITH_PARTNER), judged,
            again=twice if seat.device == "cpu" else disturbed, most=2, faster=True)
        timed = _settled(reply, seat, KernelTimed, Side.REFERENCE)
    finally:
        seat.let_go(partner)
    if not await _unpaired(seat, judging.worker, keep_samples=True):
        raise KernelFailed(Side.REFERENCE, Failure(
            outcome=Outcome.RUNTIME_ERROR,
            message="the judge could not end the reference's timing pairing"))
    return timed, verdict, seen


async def _candidate(job: WorkerJob, seat: Seat, judging: Judge, kernel: Worker,
                     ref_verdict: TimingVerdict, review_threshold: float
                     ) -> Judged | Wrong | SampleWrong:
    """Steps 2-5 of the module docstring."""
    judge = judging.worker
    # a host-bound reference is timed in turn with the candidate, on one core: the
    # candidate's process yields that core to it from before its code is loaded (Pair)
    await _pair(seat, job, judging, kernel,
                yield_cores=job.timing_cores if ref_verdict.host_bound else None)
    calibrated, kept = await _calibrated(seat, job, judging, uses_streams(job.kernel.source_code))
    await seat.progress("compiling the kernel", 0.3)
    loaded = await jit.load(seat, kernel, Side.KERNEL, job)
    seat.clock.lap("compile")
    await seat.progress("checking correctness", 0.4)
    trials = job.num_correct_trials
    checked: Message = await seat.call(judge, Side.KERNEL, Stage.RUNNING,
                                       Trials(first=0, count=trials),
                                       (TrialsPassed, Incorrect, *WITH_PARTNER))
    if isinstance(checked, Incorrect):
        seat.clock.lap("correctness")
        return Wrong(checked, trials)
    passed = _settled(checked, seat, TrialsPassed)
    seat.clock.lap("correctness")
    await seat.progress("timing the kernel", 0.75)
    beside = await _reference_beside(job, seat, judging) if ref_verdict.host_bound else None
    # the first samples' inputs made while the last job's processes may still be going: the
    # timing run, on the settled GPU, then only copies them
    _settled(await seat.call(judge, Side.KERNEL, Stage.TIMING,
                             PrepareSamples(num_trials=job.num_trials),
                             (Done, *WITH_PARTNER)), seat, Done)

    def judged(reply: Message, remeasured: str | None) -> TimingVerdict:
        timed = _settled(reply, seat, KernelTimed)
        return integrity.judge(timed.timing, job.num_trials, seat.device, remeasured)

    try:
        reply, verdict, seen = await measured(
            seat, judge, Side.KERNEL,
            TimeKernel(num_trials=job.num_trials, reference_ms=ref_verdict.stats.median,
                       beside=beside is not None),
            (KernelTimed, *WITH_PARTNER), judged)
    finally:
        if beside is not None:
            await _end_beside(seat, judge, beside)
    timed = _settled(reply, seat, KernelTimed)
    seat.clock.lap("timing")
    seat.clock.add("warmup", timed.timing.warmup_ms)
    seat.clock.add("timing", -timed.timing.warmup_ms)
    await seat.progress("rechecking on fresh inputs", 0.85)
    rechecked: Message = await seat.call(judge, Side.KERNEL, Stage.RECHECKING,
                                Trials(first=trials, count=1, recheck=True),
                                (TrialsPassed, Incorrect, *WITH_PARTNER))
    if isinstance(rechecked, Incorrect):
        seat.clock.lap("correctness")
        return Wrong(rechecked, trials)
    _settled(rechecked, seat, TrialsPassed)
    robust: RobustnessChecked | None = None
    if job.robustness:
        seat.clock.lap("correctness")
        await seat.progress("checking robustness", 0.87)
        robust = _settled(await seat.call(judge, Side.KERNEL, Stage.CHECKING,
                                          Robustness(first=trials + 1),
                                          (RobustnessChecked, *WITH_PARTNER)),
                          seat, RobustnessChecked)
        seat.clock.lap("robustness")
    # The kernel's process has nothing left to do but hand over what its compilers cached
    # (kept only for a source whose trials, timing and recheck passed; what a process writes
    # there is the kernel's own whatever its verdict): then it goes, and its context's
    # teardown runs beside the audit, which needs only the judge.
    caches = await jit.keep(seat, kernel, Side.KERNEL)
    seat.let_go(kernel)
    seat.clock.lap("correctness")
    await seat.progress("checking a timed sample", 0.9)
    audited = await seat.call(judge, Side.KERNEL, Stage.AUDITING, Audit(), Audited)
    seat.clock.lap("audit")
    held = Held(timed.resources, passed.input_bytes, passed.output_bytes)
    if audited.problem is not None:
        return SampleWrong(audited, held)
    process = KernelProcess(Where.of(job, seat), loaded.artifacts, ProcessSetup.of(kernel))
    return Judged(process=process, timed=Timed(verdict, seen.gpu_state), held=held,
                  trials=trials, passed=passed, calibrated=calibrated, calibration=kept,
                  audited=audited, jit_cache=caches, review_threshold=review_threshold,
                  work=timed.work, robustness=robust.report if robust is not None else None,
                  trace=timed.timing.kernel_trace, beside=timed.beside,
                  pairs=integrity.paired_ratios(timed.beside, timed.timing)
                  if timed.beside is not None else None)


async def _reference_beside(job: WorkerJob, seat: Seat, judging: Judge) -> Worker | None:
    """A fresh process of the reference, paired with the judge beside the candidate's,
    calibrated before it loads the reference's source (:mod:`judge.beside`); None where that
    could not be set up (a second arena that does not fit in the GPU's memory, a process that
    fails to start): the reference's own reading then stands, as the comparison's figure."""
    assert job.ref_kernel is not None
    partner = await seat.take("reference (timed beside)", Needs.of(job.ref_kernel.source_code))
    try:
        ours, theirs = socket.socketpair()
        with ours, theirs:
            await seat.call(judging.worker, Side.REFERENCE, Stage.STARTING,
                            Pair(role=Role.JUDGE, beside=True), Done, [ours.fileno()])
            await seat.call(partner, Side.REFERENCE, Stage.STARTING, Pair(role=Role.KERNEL),
                            Done, [theirs.fileno()])
        answer: Message
        answer, _ = await seat.timed(judging.worker, Side.REFERENCE, Stage.CALIBRATING,
                                     Calibrate(beside=True), (Calibrated, *WITH_PARTNER))
        _settled(answer, seat, Calibrated, Side.REFERENCE)
        await jit.load(seat, partner, Side.REFERENCE,
                       job.model_copy(update={"kernel": job.ref_kernel}))
    except KernelFailed as failed:
        seat.let_go(partner)
        await seat.call(judging.worker, Side.REFERENCE, Stage.STARTING, Unpair(beside=True), Done)
        log.warning("job %s: the reference's process beside the candidate's could not be set "
                    "up (%s); its own reading stands", job.job_id, failed.failure.message[:200])
        return None
    except BaseException:
        seat.let_go(partner)
        raise
    return partner


async def _end_beside(seat: Seat, judge: Worker, beside: Worker) -> None:
    """The reference's process beside let go and its pairing ended, the job's step left where
    the candidate's timing had it (what a failure of that timing is then attributed to)."""
    side, stage = seat.step.side, seat.step.stage
    seat.let_go(beside)
    await seat.call(judge, Side.REFERENCE, Stage.STARTING, Unpair(beside=True), Done)
    seat.step.set(side, stage)


def _settled(reply: Message, seat: Seat, expected: type[M], side: Side = Side.KERNEL) -> M:
    """A judge's answer that did not go its way, raised as what it means; else ``reply``.
    ``side``: whose code the judge's partner runs (the candidate's, or the reference's while
    the reference is timed)."""
    if isinstance(reply, PartnerFailed):
        raise KernelFailed(side, reply.failure)
    if isinstance(reply, PartnerGone):
        seat.step.set(side, seat.step.stage)
        if reply.broke_protocol:
            raise KernelFailed(side, Failure(
                outcome=Outcome.RUNTIME_ERROR,
                message=f"the kernel's process broke the harness's protocol while "
                        f"{reply.during} ({reply.broke_protocol[:300]}): the kernel's code must "
                        "have written to its channel"))
        raise WorkerDied(f"the kernel's process went away during {reply.during}")
    if isinstance(reply, Failure):
        if side == Side.REFERENCE:
            raise KernelFailed(side, reply)
        raise _ReferenceFailed(reply)
    assert isinstance(reply, expected)
    return reply


async def _pair(seat: Seat, job: WorkerJob, judging: Judge, kernel: Worker,
                yield_cores: list[int] | None = None) -> None:
    """A socket pair between the two processes; the judge alone learns the secret.
    ``yield_cores``: the kernel's process's, for good (``Pair.yield_cores``)."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        await seat.call(judging.worker, Side.REFERENCE, Stage.STARTING,
                        Pair(role=Role.JUDGE, secret=secrets.randbits(62), job=job,
                             pairing=judging.paired_with(kernel)), Done,
                        [ours.fileno()])
        await seat.call(kernel, Side.KERNEL, Stage.STARTING,
                        Pair(role=Role.KERNEL, yield_cores=yield_cores), Done,
                        [theirs.fileno()])


async def _calibrated(seat: Seat, job: WorkerJob, judge: Judge,
                      streams: bool) -> tuple[Calibrated, JudgeCalibration]:
    """The judge's clock calibrated for this pairing, and how (for the result's metadata):
    with the null call the judge measured in an earlier pairing where that one still serves
    (:class:`orchestration.references.Calibration`; the judge checks the layout is the same),
    an untimed request that maps the arena, else measured now, on a settled device, before
    the partner loads its code."""
    answer: Message
    kept = judge.calibration
    now = time.monotonic()
    note = JudgeCalibration(kept=False, taken_by_job=job.job_id, age_ms=0.0)
    if kept is not None:
        age_ms = round((now - kept.taken_at) * 1e3, 1)
        why = kept.unfit(streams, now, job.job_id) or (CPU_UNKEPT if seat.device == "cpu" else None)
        if why is None:
            answer = await seat.call(judge.worker, Side.KERNEL, Stage.CALIBRATING,
                                     Calibrate(kept=True, free=judge.free_pairings()),
                                     (Calibrated, *WITH_PARTNER))
            calibrated = _settled(answer, seat, Calibrated)
            if calibrated.kept:
                return calibrated, JudgeCalibration(kept=True, taken_by_job=kept.by_job,
                                                    age_ms=age_ms)
            why = "the judge held none for this layout"
        note.not_kept = f"{why} (the judge's last, {age_ms} ms old)"
    judge.calibration = None
    answer, _ = await seat.timed(judge.worker, Side.KERNEL, Stage.CALIBRATING,
                                 Calibrate(free=judge.free_pairings()),
                                 (Calibrated, *WITH_PARTNER))
    calibrated = _settled(answer, seat, Calibrated)
    judge.calibration = Calibration(streams, time.monotonic(), job.job_id)
    return calibrated, note


async def _unpaired(seat: Seat, judge: Worker, keep_samples: bool = False) -> bool:
    """End the pairing; whether the judge may serve the next candidate. ``keep_samples``:
    the inputs of its timing serve this job's candidate (``Unpair.keep_samples``)."""
    try:
        await seat.call(judge, Side.REFERENCE, Stage.STARTING,
                        Unpair(keep_samples=keep_samples), Done)
    except Exception:  # noqa: BLE001 - a judge that cannot unpair is not kept
        return False
    return True
