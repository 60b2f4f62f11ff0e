"""/evaluate and /validate: one kernel, on its own inputs, in one process.

There is no reference, so there is no verdict on the kernel's outputs and nothing to judge
its number by but its own process: the timing is taken there (:class:`TimeSelf`) and
cross-checked in-process (:func:`profiling.integrity.assess`). A comparison is what a number
that must hold against a determined kernel is for.
"""

from __future__ import annotations

from orchestration.facts import Evaluated, Failed, Held, KernelProcess, ProcessSetup, Timed, Where
from orchestration.flows import jit
from orchestration.flows.timing import assess_with, measured
from orchestration.job_step import Side, Stage
from orchestration.placement import KernelFailed, Seat
from orchestration.worker_kinds import Needs
from profiling.integrity import TimingVerdict
from shared.models import WorkerJob
from shared.protocol import RanOnce, RunOnce, SelfTimed, TimeSelf


async def evaluate(job: WorkerJob, seat: Seat) -> Evaluated | Failed:
    worker = await seat.take("kernel", Needs.of(job.kernel.source_code, alone=True))
    await seat.progress("compiling the kernel", 0.2)
    try:
        loaded = await jit.load(seat, worker, Side.ALONE, job)
        seat.clock.lap("compile")
        await seat.progress("running the kernel", 0.4)
        ran = await seat.call(worker, Side.ALONE, Stage.RUNNING, RunOnce(), RanOnce)
        seat.clock.lap("correctness")
        used, timed, trace = ran.resources, None, None
        if job.kind == "evaluate":
            await seat.progress("timing the kernel", 0.6)
            reply, verdict, seen = await measured(
                seat, worker, Side.ALONE, TimeSelf(num_trials=job.num_trials), SelfTimed,
                assess_with(job.num_trials, seat.device),
                again=TimingVerdict.worth_measuring_again)
            seat.clock.lap("timing")
            seat.clock.add("warmup", reply.timing.warmup_ms)
            seat.clock.add("timing", -reply.timing.warmup_ms)
            used, timed = reply.resources, Timed(verdict, seen.gpu_state)
            trace = reply.trace
    except KernelFailed as failed:
        seat.clock.lap(seat.step.stage.lap)
        return Failed(failed.side, failed.failure)
    process = KernelProcess(Where.of(job, seat), loaded.artifacts, ProcessSetup.of(worker))
    return Evaluated(process=process, outputs=ran.outputs,
                     held=Held(used, ran.input_bytes, ran.output_bytes), timed=timed,
                     jit_cache=await jit.keep(seat, worker, Side.ALONE), trace=trace)
