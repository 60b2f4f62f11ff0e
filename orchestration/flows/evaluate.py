"""/evaluate and /validate: one kernel, on its own inputs, in one process.

There is no reference, so there is no verdict on the kernel's outputs and nothing to judge
its number by but its own process: the timing is taken there (:class:`TimeSelf`) and
cross-checked in-process (:func:`profiling.integrity.assess`). A comparison is what a number
that must hold against a determined kernel is for.
"""

from __future__ import annotations

from orchestration import verdicts
from orchestration.flows import jit, results
from orchestration.flows.timing import assess_with, measured
from orchestration.job_step import Side, Stage
from orchestration.placement import KernelFailed, Seat
from orchestration.worker_kinds import Needs
from profiling.integrity import TimingVerdict
from shared.models import WorkerJob, WorkerResult
from shared.protocol import RanOnce, RunOnce, SelfTimed, TimeSelf


async def evaluate(job: WorkerJob, seat: Seat) -> WorkerResult:
    worker = await seat.take("kernel", Needs.of(job.kernel.source_code, alone=True))
    await seat.progress("compiling the kernel", 0.2)
    try:
        loaded = await jit.load(seat, worker, Side.ALONE, job)
        seat.clock.lap("compile")
        await seat.progress("running the kernel", 0.4)
        ran = await seat.call(worker, Side.ALONE, Stage.RUNNING, RunOnce(), RanOnce)
        seat.clock.lap("correctness")
        result = results.success(job, seat, loaded.artifacts)
        result.metadata["outputs"] = [f"{m.dtype}{m.shape}" for m in ran.outputs]
        results.process_setup(result, worker)
        used = ran.resources
        if job.kind == "evaluate":
            await seat.progress("timing the kernel", 0.6)
            timed, verdict, seen = await measured(
                seat, worker, Side.ALONE, TimeSelf(num_trials=job.num_trials), SelfTimed,
                assess_with(job.num_trials, seat.device),
                again=TimingVerdict.worth_measuring_again)
            seat.clock.lap("timing")
            seat.clock.add("warmup", timed.timing.warmup_ms)
            seat.clock.add("timing", -timed.timing.warmup_ms)
            results.with_timing(result, verdict, seen)
            used = timed.resources
    except KernelFailed as failed:
        seat.clock.lap(seat.step.stage.lap)
        return verdicts.from_failure(job, failed.side, failed.failure)
    result.metadata["resources"] = results.resources(used, ran.input_bytes, ran.output_bytes)
    caches = await jit.keep(seat, worker, Side.ALONE)
    if caches is not None:
        result.metadata["jit_cache"] = caches
    return WorkerResult(kernel_exec_result=result)
