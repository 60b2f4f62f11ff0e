"""The one assembly of a job's result (orchestration/verdicts.py)."""

from __future__ import annotations

import signal

from orchestration import verdicts
from orchestration.job_step import JobStep, Side, Stage
from shared.models import JobState, KernelCode, Outcome, WorkerJob

CUSTOM = KernelCode(source_code="class ModelNew: pass", kernel_type="torch")
REF = KernelCode(source_code="class Model: pass", kernel_type="torch")


def compare_job() -> WorkerJob:
    return WorkerJob(job_id="j1", kind="compare", kernel=CUSTOM, ref_kernel=REF, cache_dir="/c")


def step_at(side: Side, stage: Stage) -> JobStep:
    step = JobStep()
    step.set(side, stage)
    return step


def test_a_timeout_and_a_crash_carry_the_step_they_stopped_at_as_data() -> None:
    timed_out = verdicts.timed_out(compare_job(), 5, step_at(Side.KERNEL, Stage.AUDITING))
    assert timed_out.state == JobState.TIMED_OUT
    assert timed_out.stage == "checking a timed sample of the custom kernel"
    killed = signal.SIGKILL  # a status as os.waitpid reports a process killed by it
    crashed = verdicts.crashed(compare_job(), step_at(Side.REFERENCE, Stage.TIMING), [killed])
    assert crashed.stage == "timing the reference kernel"
    assert crashed.kernel_exec_result is not None
    assert crashed.kernel_exec_result.outcome == Outcome.NOT_RUN
