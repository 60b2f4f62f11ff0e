"""The one place that turns how a job ended into its verdict.

A job ends with a verdict on its kernels, whatever happened to them (a kernel's failure is
data, never a server error); :class:`Ending` names the ways, each made into a
:class:`~shared.models.WorkerResult` here:

- the kernel (or the reference) failed in its own words: a :class:`~shared.protocol.Failure`
  (compile or runtime error) from the process that ran it, or from the judge on its behalf;
- its worker died (:func:`crashed`: the signal or exit code, and the step it died in);
- it ran past its timeout (:func:`timed_out`);
- the judge found its outputs wrong (:func:`incorrect`).

Which side a verdict belongs to follows one rule: when the reference fails, a comparison has
no verdict on the candidate (``not_run``) and the answer's ``error`` says why.
"""

from __future__ import annotations

import os
import signal
from contextlib import suppress
from enum import Enum

from orchestration.job_step import JobStep, Side, Stage
from shared.models import (
    IntegrityReport,
    JobState,
    KernelExecResult,
    Outcome,
    WorkerJob,
    WorkerResult,
)
from shared.protocol import Failure


class Ending(str, Enum):
    FAILED = "failed"  # the kernel's own failure
    CRASHED = "crashed"  # its process died
    TIMED_OUT = "timed_out"
    INCORRECT = "incorrect"


AUDIT_CHECK = "a timed sample's outputs checked against the reference (picked after it ran)"


def from_failure(job: WorkerJob, side: Side, failure: Failure) -> WorkerResult:
    """A side's own failure as the job's result."""
    compile_error = failure.outcome == Outcome.COMPILE_ERROR
    verdict = KernelExecResult(
        outcome=failure.outcome, compiled=not compile_error,
        compilation_error=failure.message if compile_error else None,
        runtime_error=None if compile_error else failure.message)
    return _placed(job, side, verdict, out_of_memory=failure.out_of_memory)


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


def crashed(job: WorkerJob, step: JobStep, statuses: list[int | None]) -> WorkerResult:
    """A worker died mid-step: the first abnormal status names how."""
    how = "died"
    for status in statuses:
        if status is not None and (os.WIFSIGNALED(status) or os.WEXITSTATUS(status) != 0):
            how = describe_status(status)
            break
    message = f"the worker process {how} while {step.describe()}"
    compiled = step.stage.compiled
    verdict = KernelExecResult(
        outcome=Outcome.RUNTIME_ERROR if compiled else Outcome.COMPILE_ERROR, compiled=compiled,
        runtime_error=message if compiled else None,
        compilation_error=None if compiled else message)
    if job.kind == "compare" and step.side == Side.REFERENCE:
        return WorkerResult(ref_exec_result=verdict, error="the reference kernel crashed the worker",
                            kernel_exec_result=KernelExecResult(outcome=Outcome.NOT_RUN),
                            stage=step.describe())
    return WorkerResult(kernel_exec_result=verdict, stage=step.describe())


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


__all__ = ["AUDIT_CHECK", "Ending", "Stage", "crashed", "from_failure", "incorrect",
           "protocol_violation", "succeeded", "timed_out", "timed_sample_wrong", "worker_fault"]
