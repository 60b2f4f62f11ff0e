"""The one place a job's result is assembled: a typed :class:`~shared.models.WorkerResult`,
then the answer a client gets (:func:`response`).

A job ends with a verdict on its kernels, whatever happened to them (a kernel's failure is
data, never a server error). Its result is made here from:

- the facts its flow established (:mod:`orchestration.facts`; :func:`of`), among them a
  side's own failure, in its own words (:func:`from_failure`);
- how it ended otherwise: its worker died (:func:`crashed`), it ran past its timeout
  (:func:`timed_out`), the harness faulted or its protocol was broken (:func:`worker_fault`,
  :func:`protocol_violation`), its problem cannot fit the host (:func:`does_not_fit`), the
  server failed (:func:`server_fault`);
- what the executor learnt after the flow: the result is a second attempt's
  (:func:`retried_alone`), the device metrics (:func:`with_device_metrics`,
  :func:`without_device_metrics`), the processes' output (:func:`with_output_tail`), the
  worker requests (:func:`with_worker_calls`), the Ray node (:func:`placed_on`).

Which side a verdict belongs to follows one rule: when the reference fails, a comparison has
no verdict on the candidate (``not_run``) and the answer's ``error`` says why.
"""

from __future__ import annotations

import os
import signal
from contextlib import suppress
from typing import Any

from orchestration.facts import (
    Evaluated,
    Facts,
    Failed,
    Held,
    Judged,
    KernelProcess,
    Reference,
    SampleWrong,
    Timed,
    Where,
    Wrong,
)
from orchestration.job_step import JobStep, Side
from profiling import integrity, provenance, sol
from profiling.device_metrics import DeviceMetricsResult
from shared.models import (
    CompareResponse,
    DeviceMetrics,
    IntegrityReport,
    JobKind,
    JobState,
    KernelCode,
    KernelExecResult,
    Outcome,
    ProblemSize,
    RayPlacement,
    ReferenceNote,
    ResourceUse,
    ResultMetadata,
    TimedSampleAudit,
    WorkerCalls,
    WorkerJob,
    WorkerResult,
)
from shared.protocol import REHEARSE_ALL, REHEARSE_ALONE, Audited, Failure

CPU_TIMING_NOTE = "CPU mode: timings are CPU wall-clock times, not GPU times"
AUDIT_CHECK = "a timed sample's outputs checked against the reference (picked after it ran)"
# A side whose median, less the hand-over's cost, is 0 (a call cheaper than the hand-over's
# spread on this host): a ratio of it is no figure, so the speedup is null
UNRESOLVED = ("no speedup: {side} calls cost less than the judge's clock resolves here (their "
              "median, less the hand-over's own cost, is 0)")
JUDGED_CHECKS = [
    "verdict by a separate process that never imported the kernel",
    "inputs after trial 0 and of every timed sample drawn from a secret the kernel never saw",
    "inputs unchanged after every call",
    "outputs rechecked on fresh inputs after timing",
]
OUTPUT_TAIL_BYTES = 4096  # of each process's output, kept with a result that did not succeed


# ---- a flow's facts


def of(job: WorkerJob, facts: Facts) -> WorkerResult:
    """The result of what ``job``'s flow established."""
    if isinstance(facts, Failed):
        return from_failure(job, facts.side, facts.failure)
    if isinstance(facts, Evaluated):
        return WorkerResult(kernel_exec_result=_evaluated(facts, job.kernel, job.problem_size))
    reference = _reference(facts.reference)
    candidate = facts.candidate
    if isinstance(candidate, Failed):
        result = from_failure(job, candidate.side, candidate.failure)
        if candidate.side != Side.KERNEL:
            return result
        result.ref_exec_result = reference
    elif isinstance(candidate, Wrong):
        result = WorkerResult(kernel_exec_result=_wrong(candidate), ref_exec_result=reference)
    elif isinstance(candidate, SampleWrong):
        result = WorkerResult(kernel_exec_result=_sample_wrong(candidate),
                              ref_exec_result=reference)
    else:
        result = WorkerResult(kernel_exec_result=_judged(candidate, facts.reference, reference),
                              ref_exec_result=reference)
        _with_speed_of_light(job, candidate, facts.reference, result)
        _with_provenance(job, candidate, facts.reference, result)
    assert result.kernel_exec_result is not None
    meta = result.kernel_exec_result.metadata
    meta.reference_reused = facts.reference.reused
    meta.reference = ReferenceNote(reused=facts.reference.reused,
                                   timed_by_job=facts.reference.figure.timed_by_job)
    return result


def _with_speed_of_light(job: WorkerJob, judged: Judged, reference: Reference,
                         result: WorkerResult) -> None:
    """Each side's distance from the problem's roofline bound (the candidate's scored
    against the reference's figure): the judge's count of the reference's work, or the
    request's ``problem_size``, over this GPU's peak figures."""
    device = _gpu_name(judged.process.where)
    ref_ms = reference.verdict.stats.median
    io_bytes = judged.held.input_bytes + judged.held.output_bytes
    sides = ((result.kernel_exec_result, judged.timed.verdict.stats.median,
              judged.timed.gpu_state), (result.ref_exec_result, ref_ms, reference.figure.gpu_state))
    for verdict, ms, state in sides:
        if verdict is not None:
            verdict.metadata.speed_of_light = sol.speed_of_light(
                device, ms, reference_ms=ref_ms, io_bytes=io_bytes,
                work=judged.work or reference.figure.timed.work, hints=job.problem_size,
                sm_clock_mhz=_sm_clock(state))


def _gpu_name(where: Where) -> str | None:
    """The GPU's name as the peak table knows it; None in CPU mode."""
    return where.gpu_type if where.device == "cuda" else None


def _sm_clock(state: dict[str, Any] | None) -> tuple[float, float] | None:
    """The median SM clock a timing ran at and the GPU's highest (``gpu_state``), if read."""
    if not state or not state.get("sm_clock_max_mhz"):
        return None
    running = (state.get("sm_clock_mhz") or {}).get("median")
    return (float(running), float(state["sm_clock_max_mhz"])) if running else None


def _with_provenance(job: WorkerJob, judged: Judged, reference: Reference,
                     result: WorkerResult) -> None:
    """Which kernels each side's traced call ran, and the math modes it ran under; a
    candidate that ran with looser modes than its reference is flagged. (That none of its
    own kernels ran is said in its block, not flagged: a submission may rightly call a
    library.)"""
    assert job.ref_kernel is not None
    found = provenance.assemble(
        judged.trace, job.kernel, reference.figure.timed.timing.kernel_trace, job.ref_kernel,
        judged.timed.verdict.stats.median, reference.verdict.stats.median)
    verdict, ref_verdict = result.kernel_exec_result, result.ref_exec_result
    if verdict is not None and found.candidate is not None:
        verdict.metadata.provenance = found.candidate.model_dump(mode="json")
    if ref_verdict is not None and found.reference is not None:
        ref_verdict.metadata.provenance = found.reference.model_dump(mode="json")
    if verdict is None or found.precision_parity is None:
        return
    verdict.metadata.precision_parity = found.precision_parity.model_dump(mode="json")
    report = verdict.integrity or IntegrityReport()
    report.checks += found.checks
    if found.precision_parity.looser:
        report.suspicious = True
        report.reasons.append("the candidate ran with looser math modes than its reference: "
                              + "; ".join(found.precision_parity.looser))
    verdict.integrity = report


def _evaluated(facts: Evaluated, kernel: KernelCode, hints: ProblemSize | None
               ) -> KernelExecResult:
    result = _success(facts.process)
    result.metadata.outputs = [f"{m.dtype}{m.shape}" for m in facts.outputs]
    if facts.timed is not None:
        _with_timing(result, facts.timed)
        result.metadata.speed_of_light = sol.speed_of_light(
            _gpu_name(facts.process.where), facts.timed.verdict.stats.median,
            io_bytes=facts.held.input_bytes + facts.held.output_bytes, hints=hints,
            sm_clock_mhz=_sm_clock(facts.timed.gpu_state))
    if facts.trace is not None:
        found = provenance.assemble(facts.trace, kernel, candidate_ms=(
            facts.timed.verdict.stats.median if facts.timed is not None else None))
        if found.candidate is not None:
            result.metadata.provenance = found.candidate.model_dump(mode="json")
    result.metadata.resources = _resources(facts.held)
    if facts.jit_cache is not None:
        result.metadata.jit_cache = facts.jit_cache
    return result


def _reference(facts: Reference) -> KernelExecResult:
    result = _success(facts.process, correctness=True)
    _with_timing(result, Timed(facts.verdict, facts.figure.gpu_state))
    timed = facts.figure.timed
    result.metadata.reused = facts.reused
    result.metadata.timed_by_job = facts.figure.timed_by_job
    result.metadata.resources = _resources(Held(timed.resources, timed.input_bytes,
                                                 timed.output_bytes))
    return result


def _judged(facts: Judged, reference: Reference, ref_result: KernelExecResult
            ) -> KernelExecResult:
    result = _success(facts.process, correctness=True)
    meta = result.metadata
    if facts.jit_cache is not None:
        meta.jit_cache = facts.jit_cache
    _with_timing(result, facts.timed)
    meta.resources = _resources(facts.held)
    meta.correctness_trials = facts.trials
    meta.tensor_transfer = "gpu" if facts.calibrated.where == "device" else "host"
    meta.arena_bytes = facts.calibrated.arena_bytes
    meta.arena_reused = facts.calibrated.arena_reused
    meta.timed_sample_audit = _audit_note(facts.audited)
    meta.judge_spent_ms = {**{f"trials.{k}": v for k, v in facts.passed.spent_ms.items()},
                           **{f"audit.{k}": v for k, v in facts.audited.spent_ms.items()}}
    report = result.integrity or IntegrityReport()
    report.checks += JUDGED_CHECKS
    if facts.audited.checked:
        report.checks.append(AUDIT_CHECK)
    elif not facts.audited.expected:
        report.suspicious = True
        report.reasons.append(f"no timed sample could be checked: {facts.audited.skipped}")
    meta.judge_calibration = facts.calibration
    if facts.robustness is not None:
        meta.robustness = facts.robustness
    median, ref_median = facts.timed.verdict.stats.median, reference.verdict.stats.median
    meta.speedup = ref_median / median if median > 0 and ref_median > 0 else None
    meta.speedup_statistic = "median"
    if reference.paired is not None:  # the two sides timed in turn: pair by pair
        meta.speedup = reference.paired.median
        meta.speedup_statistic = integrity.PAIRED_STATISTIC
        report.checks.append(reference.paired.check())
        if (slowed := reference.paired.slowed()) is not None:
            report.suspicious = True
            report.reasons.append(slowed)
    elif meta.speedup is None:
        report.checks.append(UNRESOLVED.format(
            side="the candidate's" if median <= 0 else "the reference's"))
    result.integrity = integrity.flag_speedup(report, meta.speedup, facts.review_threshold)
    # the reference's peak is the larger of its timing's and its trials'
    used = ref_result.metadata.resources
    assert used is not None
    used.peak_memory_bytes = max(used.peak_memory_bytes,
                                 facts.passed.reference_resources.peak_memory_bytes)
    return result


def _wrong(facts: Wrong) -> KernelExecResult:
    found = facts.found
    result = incorrect(found.trial, facts.trials, found.problem, recheck=found.recheck)
    result.metadata.resources = _resources(Held(found.kernel_resources, found.input_bytes,
                                                found.output_bytes))
    return result


def _sample_wrong(facts: SampleWrong) -> KernelExecResult:
    assert facts.audited.problem is not None
    result = timed_sample_wrong(facts.audited.problem)
    result.metadata.timed_sample_audit = _audit_note(facts.audited)
    result.metadata.resources = _resources(facts.held)
    return result


def _success(process: KernelProcess, correctness: bool | None = None) -> KernelExecResult:
    where, setup = process.where, process.setup
    meta = ResultMetadata(device=where.device, gpu_id=where.gpu_id)
    if where.device == "cuda":
        meta.gpu_type = where.gpu_type
    else:
        meta.gpu_type = None
        meta.timing_note = CPU_TIMING_NOTE
    meta.device_metrics = None
    if process.artifacts:
        meta.artifacts = dict(process.artifacts)
    # how its process was made (see orchestration.worker_pool)
    if setup.queues is not None:
        meta.work_queues = int(setup.queues)
    if setup.warmed is not None:
        meta.worker_warmed = setup.warmed.libs
        meta.worker_rehearsed = REHEARSE_ALONE if setup.warmed.alone else REHEARSE_ALL
    return KernelExecResult(outcome=Outcome.SUCCESS, compiled=True, correctness=correctness,
                            metadata=meta)


def _with_timing(result: KernelExecResult, timed: Timed) -> None:
    verdict = timed.verdict
    result.runtime_stats, result.runtime = verdict.stats, verdict.stats.mean
    result.integrity = verdict.report
    result.metadata.timing_figures = verdict.figures
    if timed.gpu_state is not None:
        result.metadata.gpu_state = timed.gpu_state


def _resources(held: Held) -> ResourceUse:
    return ResourceUse(**held.resources.model_dump(), input_bytes=int(held.input_bytes),
                       output_bytes=int(held.output_bytes))


def _audit_note(audited: Audited) -> TimedSampleAudit:
    note = TimedSampleAudit(audited=bool(audited.checked), checked=audited.checked,
                            samples=audited.samples)
    if audited.wrong_sample is not None:
        note.wrong_sample = audited.wrong_sample
    if audited.skipped:
        note.reason = audited.skipped
        note.expected = audited.expected
    return note


# ---- the kernel's own failures, and how else a job ends


def from_failure(job: WorkerJob, side: Side, failure: Failure) -> WorkerResult:
    """A side's own failure as the job's result."""
    compile_error = failure.outcome == Outcome.COMPILE_ERROR
    verdict = KernelExecResult(
        outcome=failure.outcome, compiled=not compile_error,
        compilation_error=failure.message if compile_error else None,
        runtime_error=None if compile_error else failure.message)
    return _placed(job, side, verdict, out_of_memory=failure.out_of_memory)


def incorrect(trial: int, trials: int, problem: str, recheck: bool) -> KernelExecResult:
    if recheck:
        where = ("after timing, on fresh inputs in the same buffers (a kernel that caches its "
                 "outputs fails here)")
    else:
        where = f"correctness trial {trial + 1} of {trials}"
    verdict = KernelExecResult(outcome=Outcome.INCORRECT, compiled=True, correctness=False,
                               validation_error=f"{where}: {problem}")
    if recheck:
        verdict.integrity = IntegrityReport(
            checks=["outputs rechecked on fresh inputs after timing"], suspicious=True,
            reasons=["correct during the trials but wrong after timing: cached or stale outputs"])
    return verdict


def timed_sample_wrong(problem: str) -> KernelExecResult:
    return KernelExecResult(
        outcome=Outcome.INCORRECT, compiled=True, correctness=False, validation_error=problem,
        integrity=IntegrityReport(
            checks=[AUDIT_CHECK], suspicious=True,
            reasons=[("correct when checked but wrong while timed: the kernel computes "
                      "differently in a timing loop")]))


def worker_fault(job: WorkerJob, side: Side, step: JobStep, message: str) -> WorkerResult:
    """A harness error reported by a process that has run user code: it may be the harness's
    fault or a kernel that wrote to its channel; either way the kernel gets the verdict (a
    kernel must never cause a 500) and the operator the log line."""
    verdict = KernelExecResult(outcome=Outcome.RUNTIME_ERROR, compiled=step.stage.compiled,
                               runtime_error=f"the worker failed while {step.describe()}: "
                                             f"{message[-2000:]}")
    return _placed(job, side, verdict)


def protocol_violation(job: WorkerJob, side: Side, step: JobStep, what: str) -> WorkerResult:
    verdict = KernelExecResult(
        outcome=Outcome.RUNTIME_ERROR, compiled=step.stage.compiled,
        runtime_error=f"the kernel's process broke the harness's protocol while "
                      f"{step.describe()} ({what[:300]}): the kernel's code must have written "
                      "to the worker's channel")
    return _placed(job, side, verdict)


def crashed(job: WorkerJob, step: JobStep, statuses: list[int | None],
            host_oom: str = "") -> WorkerResult:
    """A worker died mid-step: the first abnormal status names how; ``host_oom`` says when
    the host's OOM killer most likely did it (added to the kernel's runtime error)."""
    how = "died"
    for status in statuses:
        if status is not None and (os.WIFSIGNALED(status) or os.WEXITSTATUS(status) != 0):
            how = describe_status(status)
            break
    message = f"the worker process {how} while {step.describe()}"
    if job.kind == "compare" and step.side == Side.REFERENCE:
        return WorkerResult(ref_exec_result=_crash(step, message),
                            error="the reference kernel crashed the worker",
                            kernel_exec_result=KernelExecResult(outcome=Outcome.NOT_RUN),
                            stage=step.describe())
    return WorkerResult(kernel_exec_result=_crash(step, message, host_oom), stage=step.describe())


def _crash(step: JobStep, message: str, cause: str = "") -> KernelExecResult:
    compiled = step.stage.compiled
    return KernelExecResult(
        outcome=Outcome.RUNTIME_ERROR if compiled else Outcome.COMPILE_ERROR, compiled=compiled,
        runtime_error=message + cause if compiled else None,
        compilation_error=None if compiled else message)


def timed_out(job: WorkerJob, timeout: float, step: JobStep) -> WorkerResult:
    message = f"Evaluation timed out after {timeout:g} seconds (while {step.describe()})"
    verdict = KernelExecResult(outcome=Outcome.TIMEOUT, compiled=step.stage.compiled,
                               runtime_error=message)
    if job.kind == "compare" and step.side == Side.REFERENCE:
        return WorkerResult(state=JobState.TIMED_OUT, error=message, ref_exec_result=verdict,
                            kernel_exec_result=KernelExecResult(outcome=Outcome.NOT_RUN),
                            stage=step.describe())
    return WorkerResult(state=JobState.TIMED_OUT, error=message, kernel_exec_result=verdict,
                        stage=step.describe())


def does_not_fit(message: str) -> WorkerResult:
    """A problem refused before it ran (:mod:`orchestration.fits`)."""
    verdict = KernelExecResult(outcome=Outcome.RUNTIME_ERROR, compiled=False,
                               runtime_error=message)
    return WorkerResult(state=JobState.COMPLETED, kernel_exec_result=verdict)


def server_fault(error: str) -> WorkerResult:
    """A job the server could not finish (``error`` says why): no verdict."""
    return WorkerResult(state=JobState.FAILED, error=error)


def _placed(job: WorkerJob, side: Side, verdict: KernelExecResult,
            out_of_memory: bool = False) -> WorkerResult:
    if job.kind == "compare" and side == Side.REFERENCE:
        what = "compile" if verdict.outcome == Outcome.COMPILE_ERROR else "run"
        return WorkerResult(ref_exec_result=verdict, error=f"the reference kernel failed to {what}",
                            kernel_exec_result=KernelExecResult(outcome=Outcome.NOT_RUN),
                            out_of_memory=out_of_memory)
    return WorkerResult(kernel_exec_result=verdict, out_of_memory=out_of_memory)


def describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        with suppress(ValueError):
            return f"was killed by signal {signal.Signals(sig).name}"
        return f"was killed by signal {sig}"
    code = os.WEXITSTATUS(status)
    return f"exited with code {code} without answering (os._exit or sys.exit in kernel code?)"


def succeeded(result: WorkerResult | None) -> bool:
    if result is None:
        return False
    verdict = result.kernel_exec_result
    return result.error is None and verdict is not None and verdict.outcome == Outcome.SUCCESS


# ---- what the executor learns after the flow


def retried_alone(result: WorkerResult, idle_workers_shed: int) -> None:
    """``result`` is the second attempt of a job whose first ran out of GPU memory."""
    if result.kernel_exec_result is not None:
        result.kernel_exec_result.metadata.memory_retry = (
            "the first attempt ran out of GPU memory; this result is from a second one, "
            f"made after the last job's processes and {idle_workers_shed} idle workers were "
            "gone, with no other worker starting")


def with_device_metrics(result: WorkerResult, kernel: dict[str, Any],
                        reference: dict[str, Any] | None = None,
                        measured: tuple[DeviceMetricsResult | None,
                                        DeviceMetricsResult | None] = (None, None)) -> None:
    """Nsight Compute's metrics in the API guide's layout (``device_metrics_layout`` of
    :mod:`profiling.device_metrics`): the kernel's (for a comparison, the reference's beside
    the candidate's), and the reference's own; ``measured`` (the kernel's and the
    reference's parsed metrics) make each side's speed of light exact."""
    sides = ((result.kernel_exec_result, kernel, measured[0]),
             (result.ref_exec_result, reference, measured[1]))
    for verdict, layout, parsed in sides:
        if verdict is None or layout is None:
            continue
        verdict.metadata.device_metrics = DeviceMetrics(**layout)
        if verdict.metadata.speed_of_light is not None:
            sol.exact(verdict.metadata.speed_of_light, parsed)


def without_device_metrics(result: WorkerResult, device: str, reason: str) -> None:
    """Device metrics were asked for and not collected, for ``reason``."""
    if result.kernel_exec_result is not None:
        result.kernel_exec_result.metadata.device_metrics = DeviceMetrics(
            available=False, reason=reason, device=device)


def with_output_tail(result: WorkerResult | None, tails: list[str]) -> None:
    """The end of each process's output (at most :data:`OUTPUT_TAIL_BYTES` of each), kept
    with a kernel's result that did not succeed: what it printed may say why."""
    verdict = result.kernel_exec_result if result is not None else None
    if verdict is not None and verdict.outcome != Outcome.SUCCESS:
        verdict.metadata.output_tail = "".join(tails)


def with_worker_calls(result: WorkerResult, step: JobStep) -> None:
    """The server's time per kind of worker request (where a stage's time went)."""
    if result.kernel_exec_result is not None and step.calls:
        result.kernel_exec_result.metadata.worker_calls = {
            key: WorkerCalls(calls=int(entry["calls"]), ms=entry["ms"])
            for key, entry in step.summary().items()}


def placed_on(result: WorkerResult, node_id: str, address: str, attempts: int) -> None:
    """The Ray node a job ran on, and how many runs it took."""
    for verdict in (result.kernel_exec_result, result.ref_exec_result):
        if verdict is not None:
            verdict.metadata.ray = RayPlacement(node_id=node_id, address=address,
                                                attempts=attempts)


# ---- the answer


def response(job_id: str, kind: JobKind, result: WorkerResult) -> CompareResponse:
    """The answer to a job (for /evaluate and /validate only the EvaluationResponse fields are
    set). A comparison whose reference did not succeed is an error, in the reference's words."""
    answer = CompareResponse(
        job_id=job_id, status="error" if result.error else "success",
        kernel_exec_result=result.kernel_exec_result, error=result.error,
        stage_timings=result.stage_timings,
    )
    if kind != "compare":
        return answer
    answer.ref_exec_result = ref = result.ref_exec_result
    if ref is not None:
        answer.ref_runtime = ref.runtime_stats
        if ref.outcome != Outcome.SUCCESS:
            detail = ref.compilation_error or ref.runtime_error or ""
            answer.error = f"{result.error}: {detail}" if result.error else detail
            answer.status = "error"
            if answer.kernel_exec_result is None:
                answer.kernel_exec_result = KernelExecResult(outcome=Outcome.NOT_RUN)
    return answer


__all__ = ["AUDIT_CHECK", "CPU_TIMING_NOTE", "JUDGED_CHECKS", "crashed", "describe_status",
           "does_not_fit", "from_failure", "incorrect", "of", "placed_on", "protocol_violation",
           "response", "retried_alone", "server_fault", "succeeded", "timed_out",
           "timed_sample_wrong", "with_device_metrics", "with_output_tail", "with_worker_calls",
           "without_device_metrics", "worker_fault"]
