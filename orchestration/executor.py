"""Executors run one job and return its typed result; the local one owns the GPUs here.

:class:`Executor` is the boundary the job manager sees (``run(job) -> WorkerResult``). The
:class:`LocalExecutor` runs a job on this host:

1. **Build stage** (CPU, ``BUILD_WORKERS`` at once, before any GPU is taken): a torch_cuda
   source is imported in a sandboxed CPU worker with ``load_inline`` going through the build
   cache; a failing build ends the job here.
2. **Device slot**: ``JOBS_PER_GPU`` jobs per GPU at a time (1 by default), first come first
   served. With more, their untimed requests share the GPU and each timing has it to itself,
   the other jobs' processes stopped meanwhile (:mod:`orchestration.gpu_gate`); time a job
   waits there for other jobs is not taken from its timeout.
3. **Workers**: ready sandboxed workers from the pool; a comparison takes two, the
   reference (which is also the *checker*) and the custom kernel, so the process that
   imported custom code never holds the reference's outputs and never decides the verdict.
4. **The flow** (:meth:`_evaluate` or :meth:`_compare`), each step a request to a worker;
   the server keeps the clock (stage timings), the deadline, and computes every statistic
   from raw samples (:mod:`profiling.integrity`).

A worker that dies mid-step gives a verdict naming the signal and the step; a job past its
deadline has its workers killed and ends ``timed_out``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import nullcontext, suppress
from pathlib import Path
from typing import Any, Protocol

from orchestration.gpu_gate import GpuGates, freeze, thaw
from orchestration.gpu_pool import DevicePool, Slot
from orchestration.ref_cache import ReferenceCache, reference_key
from orchestration.worker_pool import DEPART_TIMEOUT_S, PoolKey, Worker, WorkerDied, WorkerPool
from profiling import integrity
from profiling.gpu_state import GpuState
from profiling.stopping import MAX_SAMPLES
from shared.job_files import write_atomic
from shared.models import (
    GPUInfo,
    IntegrityReport,
    JobState,
    KernelExecResult,
    KernelType,
    Outcome,
    WorkerJob,
    WorkerResult,
)
from shared.settings import Settings

log = logging.getLogger("kernel_eval.executor")

ProgressFn = Callable[[str, float], Awaitable[None]]
BUILD_TYPES = {KernelType.TORCH_CUDA}
# Input sets the checker makes for the custom kernel's timing samples, at most this many bytes
# in all (a set per sample where they fit: a content-keyed output cache then never hits).
TIMING_SET_BYTES = 256 * 2**20
# Before measuring a side again after its independent measures disagreed: at most this long
# for the GPU's starting workers to be up (see LocalExecutor._time).
SETTLE_BEFORE_REMEASURE_S = 5.0
# Before any timing: at most this long for the GPU's starting workers to be up and its last
# job's processes to be gone (see LocalExecutor._time).
TIMING_SETTLE_S = 10.0
TIMING_SETTLE_SHARE = 0.25  # ... and at most this share of the job's remaining time
# Before timing a reference: at most this long for the GPU's previous job's workers to be gone.
DEPARTED_WAIT_S = 2.0
# A job that ran out of GPU memory runs again with the GPU to itself when this much of its
# time is left (LocalExecutor._again_with_the_gpu_to_itself); the failures that count:
MEMORY_RETRY_MIN_S = 5.0
OUT_OF_MEMORY_MARKERS = ("CUDA out of memory", "does not fit on this GPU",
                         "could not be shared on the GPU", "CUDA_ERROR_OUT_OF_MEMORY",
                         "cudaErrorMemoryAllocation")
# A correctness trial moves the inputs to the custom process and its outputs to the checker.
# On a GPU that can share its memory between processes they stay on the device (no limit);
# through host memory (CPU mode, or a driver without it) ~1 s per few GB, so past this many
# bytes in all fewer trials run (never fewer than MIN_CORRECT_TRIALS, plus the recheck after
# timing); the result says so.
CORRECTNESS_BYTES_BUDGET = 24 * 2**30
MIN_CORRECT_TRIALS = 2
REASON_CHARS = 300
AUDIT_CHECK = "a timed sample's outputs checked against the reference (picked after it ran)"


class Executor(Protocol):
    async def run(self, job: WorkerJob, timeout: float, progress: ProgressFn) -> WorkerResult:
        """Run ``job`` to its verdict (or timeout); never raises for a kernel's fault."""
        ...

    def queue_length(self) -> int: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class Clock:
    """Stage timings of one job, in milliseconds."""

    def __init__(self) -> None:
        self.created = time.perf_counter()
        self.stages: dict[str, float] = {}
        self._mark = self.created

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.stages[stage] = self.stages.get(stage, 0.0) + (now - self._mark) * 1e3
        self._mark = now

    def add(self, stage: str, ms: float) -> None:
        self.stages[stage] = self.stages.get(stage, 0.0) + ms

    def done(self) -> dict[str, float]:
        self.stages["total"] = (time.perf_counter() - self.created) * 1e3
        return {k: round(v, 3) for k, v in self.stages.items()}


class JobStep:
    """Where a job is, so a crash or timeout can say so."""

    def __init__(self) -> None:
        self.role = "kernel"
        self.what = "starting"
        # server wall (ms) of every worker request, summed per "role.op", with counts: where a
        # stage's time goes (results' metadata["worker_calls"])
        self.calls: dict[str, dict[str, float]] = {}
        self.deadline: float | None = None  # time.monotonic() when the job times out
        # the GPU's pool key while the job holds it, and since when (monotonic) it has been
        # waiting for other jobs at the GPU's gate (None: not waiting)
        self.key: PoolKey | None = None
        self.gate_waiting_since: float | None = None
        self.gate_waited_s = 0.0
        self.gate_allowance_s = 0.0  # how much waiting may move the deadline, in all

    def gate_wait_began(self) -> None:
        self.gate_waiting_since = time.monotonic()

    def gate_wait_ended(self) -> None:
        """Time waited for other jobs at the gate moves the deadline (up to the allowance)."""
        if self.gate_waiting_since is None:
            return
        waited = time.monotonic() - self.gate_waiting_since
        self.gate_waiting_since = None
        moved = min(waited, max(0.0, self.gate_allowance_s - self.gate_waited_s))
        self.gate_waited_s += waited
        if self.deadline is not None:
            self.deadline += moved

    def time_left(self) -> float:
        """Seconds until the deadline, counting a wait at the gate in progress as not the
        job's (within the allowance)."""
        assert self.deadline is not None
        now = time.monotonic()
        extra = 0.0
        if self.gate_waiting_since is not None:
            extra = min(now - self.gate_waiting_since,
                        max(0.0, self.gate_allowance_s - self.gate_waited_s))
        return self.deadline + extra - now

    def set(self, role: str, what: str) -> None:
        self.role, self.what = role, what

    def called(self, role: str, op: str, ms: float) -> None:
        entry = self.calls.setdefault(f"{role}.{op}", {"calls": 0, "ms": 0.0})
        entry["calls"] += 1
        entry["ms"] += ms

    def summary(self) -> dict[str, dict[str, float]]:
        return {k: {"calls": int(v["calls"]), "ms": round(v["ms"], 3)}
                for k, v in self.calls.items()}

    def describe(self) -> str:
        who = {"ref": "the reference kernel", "custom": "the custom kernel",
               "build": "the build of the kernel"}.get(self.role, "the kernel")
        return f"{self.what} {who}" if self.what else who


class KernelFailed(Exception):
    """A worker answered with a verdict (compile error, runtime error) for its kernel."""

    def __init__(self, role: str, result: KernelExecResult) -> None:
        super().__init__(role)
        self.role = role
        self.result = result


class LocalExecutor:
    def __init__(self, settings: Settings, device: str, slots: list[Slot],
                 gpus: list[GPUInfo], extra_env: dict[str, str] | None = None) -> None:
        self.settings = settings
        self.device = device
        self.slots = DevicePool(slots)
        self.workers = WorkerPool(settings, device, extra_env,
                                  {g.id: g.memory_total_mb for g in gpus})
        self.gpu_types = {g.id: g.name for g in gpus}
        self.gpu_uuids = {g.id: g.uuid for g in gpus}
        self.gpu_state = GpuState()
        self.ref_cache = ReferenceCache(settings.ref_cache_dir, settings.ref_cache_bytes)
        self.builds = asyncio.Semaphore(settings.build_workers)
        self.build_stats = {"hits": 0, "lookups": 0}
        self.metrics_hook: Callable[[str, bool], None] | None = None
        self.gates = GpuGates()
        # the workers of each job on a GPU now (by its JobStep), for freezing them while
        # another job of that GPU is timed
        self._on_gpu: dict[PoolKey, dict[int, list[Worker]]] = {}

    async def start(self) -> None:
        for slot in self.slots.slots:
            self.workers.replenish(self.pool_key(slot))
        # Start the zygotes now so the first job does not wait for torch to import.
        keys = {self.pool_key(slot) for slot in self.slots.slots}
        await asyncio.gather(*(self.workers.zygote(k) for k in keys), return_exceptions=True)
        if self.device == "cuda":  # open NVML now, not inside the first job's timing
            for uuid in self.gpu_uuids.values():
                await asyncio.to_thread(self.gpu_state.handle, uuid)

    async def close(self) -> None:
        await self.workers.close()

    def queue_length(self) -> int:
        return self.slots.waiting()

    def pool_key(self, slot: Slot) -> PoolKey:
        return PoolKey(slot.gpu_id if self.device == "cuda" else None)

    def _job_key(self, job: WorkerJob) -> PoolKey:
        """The pool of the GPU a job holds."""
        return PoolKey(job.gpu_id if self.device == "cuda" else None)

    # ---- one job

    async def run(self, job: WorkerJob, timeout: float, progress: ProgressFn) -> WorkerResult:
        clock = Clock()
        step = JobStep()
        held: list[Worker] = []
        result: WorkerResult | None = None
        started = time.monotonic()
        try:
            if self.device == "cuda" and _needs_build(job):
                build = await self._build_stage(job, timeout, step, held, progress, clock)
                if build is not None:
                    return self._finished(build, clock, step)
            await progress("waiting for a GPU" if self.device == "cuda" else "queued", 0.05)
            slot = await self.slots.acquire()
            clock.lap("queue_wait")
            started = time.monotonic()  # a job's timeout runs from when it gets its GPU
            step.deadline = started + max(1.0, timeout)
            # waiting for the GPU behind other jobs' requests is not the job's time (it may
            # wait as long again as its own timeout for them)
            step.gate_allowance_s = float(timeout)
            key = self.pool_key(slot)
            if self.device == "cuda":
                step.key = key
            jobs_here = self._on_gpu.setdefault(key, {})
            jobs_here[id(step)] = held
            try:
                job.gpu_id = slot.gpu_id
                flow = self._compare if job.kind == "compare" else self._evaluate
                # SPARE_REFILL=idle: no spare starts on this GPU while the job holds it
                # (waiting jobs still get theirs); the missing ones start when it ends
                refill = (self.workers.quiet(self.pool_key(slot), 0.0)
                          if self.settings.spare_refill == "idle" else nullcontext())
                async with refill:
                    result = await self._within(flow(job, slot, step, held, progress, clock), step)
                    remaining = step.time_left()
                    if self.device == "cuda" and _out_of_gpu_memory(result) \
                            and remaining > MEMORY_RETRY_MIN_S:
                        result = await self._again_with_the_gpu_to_itself(
                            job, slot, step, held, progress, clock, flow)
                    if job.enable_device_metrics and self.device == "cuda" and _succeeded(result):
                        await progress("collecting device metrics", 0.92)
                        async with self._alone(step):  # ncu's replays beside nothing else
                            await self._device_metrics(job, slot, result, timeout)
                        clock.lap("device_metrics")
            except asyncio.TimeoutError:
                result = self._timed_out(job, timeout, step)
            finally:
                jobs_here.pop(id(step), None)
                try:  # a context's teardown disturbs a timing: not while another job has the GPU
                    await self._until_no_one_alone(step)
                finally:  # cancelled while waiting, too: the slot is never lost
                    for worker in held:
                        worker.kill()
                    self.workers.depart(self.pool_key(slot), held)
                    self.slots.release(slot)
        except WorkerDied:
            result = await self._crashed(job, step, held)
        except Exception as exc:
            log.exception("job %s failed in the server", job.job_id)
            result = WorkerResult(state=JobState.FAILED, error=f"server error: {exc}")
        finally:
            for worker in held:
                worker.kill()  # single-use: whatever it still does is of no use
            if _succeeded(result) if result is not None else False:
                # A context's teardown takes ~100 ms: a good job does not wait for it; its log
                # is written a moment after the answer.
                self.workers.background(self._finish_workers(job, list(held), None))
            else:
                await self._finish_workers(job, held, result)
        assert result is not None
        return self._finished(result, clock, step)

    async def _again_with_the_gpu_to_itself(
            self, job: WorkerJob, slot: Slot, step: JobStep, held: list[Worker],
            progress: ProgressFn, clock: Clock, flow: Any) -> WorkerResult:
        """Run a job that ran out of GPU memory once more, with the GPU to itself.

        Beside a job's two processes the GPU holds the spare workers' contexts (about 1 GB
        each) and, for a moment after each job, the last job's processes on their way out
        (with all the memory they had). A multi-GB problem that met them is not a problem
        that does not fit: it gets a second attempt once those are gone, the idle spares
        stopped and none starting, and only what that attempt says stands.
        """
        key = self.pool_key(slot)
        await self._until_no_one_alone(step)  # their teardown beside nobody's timing
        self.workers.dismiss(key, list(held))
        held.clear()
        await progress("out of GPU memory: running again with the GPU to itself", 0.5)
        # those starting up, the first attempt's workers gone, no other job's request running
        # (with JOBS_PER_GPU above 1, the other jobs' memory stays where it is)
        async with self.workers.quiet(key, DEPART_TIMEOUT_S), self._alone(step):
            shed = self.workers.shed(key)  # their contexts hold ~1 GB each
            await self.workers.departed(key, DEPART_TIMEOUT_S)
            clock.lap("memory_retry_wait")
            result = await self._within(flow(job, slot, step, held, progress, clock), step)
        if result.kernel_exec_result is not None:
            result.kernel_exec_result.metadata["memory_retry"] = (
                "the first attempt ran out of GPU memory; this result is from a second one, "
                f"made after the last job's processes and {shed} idle spare workers were gone, "
                "with no other worker starting")
        return result

    async def _within(self, flow: Awaitable[WorkerResult], step: JobStep) -> WorkerResult:
        """``flow``'s result, or TimeoutError once the job's deadline has passed (a deadline a
        wait at the GPU's gate moves, see :meth:`JobStep.time_left`)."""
        task = asyncio.ensure_future(flow)
        try:
            while True:
                left = step.time_left()
                if left <= 0:
                    raise asyncio.TimeoutError
                done, _ = await asyncio.wait({task}, timeout=left)
                if done:
                    return task.result()
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    @contextlib.asynccontextmanager
    async def _alone(self, step: JobStep) -> AsyncIterator[None]:
        """The job has its GPU to itself: the other jobs' requests in flight done, no new one
        let in, their processes stopped (a thread of theirs launches nothing on the GPU)."""
        if step.key is None:
            yield
            return
        gate = self.gates[step.key]
        if gate.alone is step:
            yield
            return
        step.gate_wait_began()
        try:
            async with gate.exclusive(step):
                step.gate_wait_ended()
                others = [w.pid for sid, workers in self._on_gpu.get(step.key, {}).items()
                          if sid != id(step) for w in workers
                          if w.pid is not None and w.status is None]
                stopped: list[int] = []
                if others:
                    stopped, problems = await asyncio.to_thread(freeze, others)
                    if problems:
                        log.warning("could not stop other jobs' processes for a timing: %s",
                                    "; ".join(problems[:3]))
                try:
                    yield
                finally:
                    if stopped:
                        await asyncio.to_thread(thaw, stopped)
        finally:
            step.gate_wait_ended()

    async def _until_no_one_alone(self, step: JobStep) -> None:
        """Return when no other job has the job's GPU to itself (at once with one job per
        GPU); what the caller does next, without awaiting, happens before another can."""
        gate = self.gates[step.key] if step.key is not None else None
        if gate is None or gate.alone is None or gate.alone is step:
            return
        async with gate.shared(None):
            pass

    async def _finish_workers(self, job: WorkerJob, held: list[Worker],
                              result: WorkerResult | None) -> None:
        """Wait for the job's workers to be gone, keep their output as the job's log (and its
        tail in a failed result), then let the pool clean up after them."""
        await asyncio.gather(*(w.exit_status(5) for w in held))
        await self._save_output(job, held, result)
        for worker in held:
            self.workers.release(worker)

    async def _save_output(self, job: WorkerJob, held: list[Worker],
                           result: WorkerResult | None) -> None:
        parts = [w.output for w in held if w.output.total_bytes]
        if not parts or not job.work_dir:
            return
        text = "".join(f"===== {w.label} =====\n{w.output.text()}\n" for w in held
                       if w.output.total_bytes) if len(parts) > 1 else parts[0].text()
        path = Path(job.work_dir) / "worker.log"
        await asyncio.to_thread(write_atomic, path, text)
        verdict = result.kernel_exec_result if result is not None else None
        if verdict is not None and verdict.outcome not in (Outcome.SUCCESS,):
            verdict.metadata["output_tail"] = "".join(w.output.tail(4096) for w in held)

    def _finished(self, result: WorkerResult, clock: Clock, step: JobStep) -> WorkerResult:
        result.stage_timings = clock.done()
        if result.kernel_exec_result is not None and step.calls:
            result.kernel_exec_result.metadata["worker_calls"] = step.summary()
        return result

    @contextlib.asynccontextmanager
    async def _shared(self, step: JobStep) -> AsyncIterator[None]:
        """One untimed request of the job on its GPU: in while no other job has the GPU alone
        (a wait that moves the job's deadline); at once without a gate or when it is the
        job's own."""
        gate = self.gates[step.key] if step.key is not None else None
        if gate is None or gate.alone is step:
            yield
            return
        step.gate_wait_began()
        try:
            async with gate.shared(step):
                step.gate_wait_ended()
                yield
        finally:
            step.gate_wait_ended()

    async def _take(self, key: PoolKey, held: list[Worker], clock: Clock,
                    step: JobStep) -> Worker:
        try:
            # a worker started for it creates a context: not during another job's timing
            async with self._shared(step):
                worker = await self.workers.take(key)
        except WorkerDied as exc:  # no user code has run yet: the server's fault
            raise RuntimeError(f"could not start a worker: {exc}") from exc
        held.append(worker)
        clock.lap("worker_wait")
        return worker

    async def _call(self, worker: Worker, step: JobStep, role: str, what: str,
                    message: dict[str, Any], fds: list[int] | None = None,
                    keep_fds: bool = False) -> tuple[dict[str, Any], list[int]]:
        """One request to a worker: (reply, the descriptors it sent). Unless ``keep_fds``,
        those are closed here: a descriptor of memory exported on the GPU keeps that memory
        allocated for as long as any process holds it open, the server included."""
        step.set(role, what)
        async with self._shared(step):
            began = time.perf_counter()
            try:
                reply, out_fds = await worker.call(message, fds or [])
            finally:
                step.called(role, str(message.get("op")), (time.perf_counter() - began) * 1e3)
        if "error" in reply:
            # Said by a process that has run user code: it may be the harness's fault, or a
            # kernel writing to the channel. Either way the kernel gets the verdict (a kernel
            # must never cause a 500) and the operator gets the message.
            _close_all(out_fds)
            log.error("a %s worker reported an internal error: %s", role, reply["error"])
            raise KernelFailed(role, KernelExecResult(
                outcome=Outcome.RUNTIME_ERROR, compiled=step.what != "compiling",
                runtime_error=f"the worker failed while {step.describe()}: "
                              f"{str(reply['error'])[-2000:]}"))
        if "result" in reply:
            _close_all(out_fds)
            raise KernelFailed(role, _failure_only(reply["result"]))
        if not keep_fds:
            _close_all(out_fds)
            return reply, []
        return reply, out_fds

    # ---- build stage

    async def _build_stage(self, job: WorkerJob, timeout: float, step: JobStep,
                           held: list[Worker], progress: ProgressFn, clock: Clock) -> WorkerResult | None:
        """Build torch_cuda sources on the CPU; a verdict if a build failed, else None."""
        kernels = [("custom" if job.kind == "compare" else "kernel", job.kernel)]
        if job.ref_kernel is not None:
            kernels.append(("ref", job.ref_kernel))
        async with self.builds:
            clock.lap("queue_wait")
            await progress("building", 0.02)
            for role, kernel in kernels:
                if kernel.kernel_type not in BUILD_TYPES:
                    continue
                builder = await self._take(PoolKey(None, build=True), held, clock, step)
                build_job = job.model_copy(update={"kernel": kernel, "ref_kernel": None, "kind": "validate"})
                try:
                    reply, _ = await asyncio.wait_for(
                        self._call(builder, step, "build", "building",
                                   {"op": "load", "job": build_job.model_dump(mode="json"),
                                    "role": "build"}), timeout)
                except KernelFailed as failed:
                    clock.lap("build")
                    return _kernel_verdict(job, role, failed.result)
                except asyncio.TimeoutError:
                    builder.kill()
                    return self._timed_out(job, timeout, step)
                finally:
                    held.remove(builder)
                    self.workers.release(builder)
                for b in reply.get("builds", []):
                    self.build_stats["lookups"] += 1
                    self.build_stats["hits"] += int(bool(b.get("cached")))
                clock.lap("build")
        return None

    # ---- /evaluate and /validate

    async def _evaluate(self, job: WorkerJob, slot: Slot, step: JobStep, held: list[Worker],
                        progress: ProgressFn, clock: Clock) -> WorkerResult:
        worker = await self._take(self.pool_key(slot), held, clock, step)
        await progress("compiling the kernel", 0.2)
        try:
            loaded, _ = await self._call(worker, step, "kernel", "compiling",
                                         {"op": "load", "job": job.model_dump(mode="json"), "role": "kernel"})
            clock.lap("compile")
            await progress("running the kernel", 0.4)
            reply, _ = await self._call(worker, step, "kernel", "running",
                                        {"op": "evaluate", "profile": False})
            clock.lap("correctness")
            timed: dict[str, Any] = {}
            if job.kind == "evaluate":
                await progress("timing the kernel", 0.6)
                timed, _ = await self._time(job, worker, step, "kernel")
        except KernelFailed as failed:
            clock.lap({"compiling": "compile", "timing": "timing"}.get(step.what, "correctness"))
            return WorkerResult(kernel_exec_result=failed.result)
        result = KernelExecResult(outcome=Outcome.SUCCESS, compiled=True,
                                  metadata=self._metadata(job, loaded))
        result.metadata["outputs"] = reply.get("outputs", [])
        result.metadata["resources"] = _resources(timed or reply, reply.get("input_bytes"),
                                                  reply.get("output_bytes"))
        if job.kind == "evaluate":
            self._apply_timing(result, timed.get("timing"), job.num_trials, clock)
            _attach_gpu_state(result, timed)
        return WorkerResult(kernel_exec_result=result)

    # ---- /compare

    async def _compare(self, job: WorkerJob, slot: Slot, step: JobStep, held: list[Worker],
                       progress: ProgressFn, clock: Clock) -> WorkerResult:
        key = self.pool_key(slot)
        gpu_type = self.gpu_types.get(slot.gpu_id or 0, "cpu") if self.device == "cuda" else "cpu"
        cache_key = reference_key(job, gpu_type)
        cached = self.ref_cache.get(cache_key) if job.reuse_reference else None
        if self.metrics_hook is not None and job.reuse_reference:
            self.metrics_hook("reference", cached is not None)
        ref_load = {"op": "load", "job": job.model_dump(mode="json"), "role": "ref",
                    "compile": cached is None}
        custom_load = {"op": "load", "job": job.model_dump(mode="json"), "role": "custom"}
        # The reference is timed before the custom kernel's code exists in any process: no
        # thread it starts, no kernel it leaves running, can slow the baseline it is measured
        # against (and a reused reference's timing was taken the same way). Until then no
        # spare starts on this GPU: the replacements for the two workers taken here would
        # create their contexts beside the reference's timing.
        async with self.workers.quiet(key, 0.0) if cached is None else nullcontext():
            checker, custom = await asyncio.gather(self._take(key, held, clock, step),
                                                   self._take(key, held, clock, step))
            checker.label, custom.label = "reference (checker)", "custom kernel"
            await progress("compiling the reference", 0.1)
            try:
                ref_loaded, _ = await self._call(checker, step, "ref", "compiling", ref_load)
            except KernelFailed as failed:
                clock.lap("compile")
                return _kernel_verdict(job, "ref", failed.result)
            clock.lap("compile")
            try:
                ref_timing = await self._time_reference(job, checker, step, cached, progress, clock)
            except KernelFailed as failed:
                return _kernel_verdict(job, "ref", failed.result)
        await progress("compiling the kernel", 0.3)
        try:
            custom_loaded, _ = await self._call(custom, step, "custom", "compiling", custom_load)
        except KernelFailed as failed:
            clock.lap("compile")
            return WorkerResult(kernel_exec_result=failed.result,
                                ref_exec_result=self._reference_result(job, ref_loaded, ref_timing))
        clock.lap("compile")
        try:
            return await self._check_and_time(job, checker, custom, step, progress, clock,
                                              cached, cache_key, ref_loaded, custom_loaded,
                                              ref_timing)
        except KernelFailed as failed:
            clock.lap("timing" if step.what == "timing" else "correctness")
            if failed.role == "ref":
                return _kernel_verdict(job, "ref", failed.result)
            return WorkerResult(kernel_exec_result=failed.result,
                                ref_exec_result=self._reference_result(job, ref_loaded, ref_timing))

    async def _time_reference(self, job: WorkerJob, checker: Worker, step: JobStep, cached: Any,
                              progress: ProgressFn, clock: Clock) -> dict[str, Any]:
        """The reference's timing (from the cache when reused): its raw report, the worker's
        reply, and the server's verdict on it. Raises KernelFailed for the reference."""
        reply: dict[str, Any] = {}
        if cached is not None:
            raw = cached.ref_raw
        else:
            await progress("timing the reference", 0.2)
            # Timed first, the reference would otherwise meet the GPU while the last job's
            # processes are still being torn down (and whatever they left running still runs).
            await self.workers.departed(self._job_key(job), DEPARTED_WAIT_S)
            await self._call(checker, step, "ref", "preparing to time", {"op": "prepare_timing"})
            reply, wall_ms = await self._time(job, checker, step, "ref")
            raw = reply.get("timing")
            if isinstance(raw, dict):
                raw["server_wall_ms"] = wall_ms
            clock.lap("timing")
        try:
            verdict = integrity.assess(raw, job.num_trials, self.device)
        except integrity.ImplausibleReport as exc:
            raise KernelFailed("ref", KernelExecResult(
                outcome=Outcome.RUNTIME_ERROR, compiled=True, runtime_error=f"timing: {exc}")) from exc
        return {"raw": raw, "reply": reply, "verdict": verdict}

    def _reference_result(self, job: WorkerJob, ref_loaded: dict[str, Any],
                          ref_timing: dict[str, Any]) -> KernelExecResult:
        """The reference's side of an answer whose custom kernel did not get through."""
        result = KernelExecResult(outcome=Outcome.SUCCESS, compiled=True,
                                  metadata=self._metadata(job, ref_loaded))
        verdict: integrity.TimingVerdict = ref_timing["verdict"]
        result.runtime_stats, result.runtime = verdict.stats, verdict.stats.mean
        result.integrity = verdict.report
        result.metadata["timing_figures"] = verdict.figures
        _attach_gpu_state(result, ref_timing["reply"])
        return result

    async def _check_and_time(self, job: WorkerJob, checker: Worker, custom: Worker,
                              step: JobStep, progress: ProgressFn, clock: Clock, cached: Any,
                              cache_key: str, ref_loaded: dict[str, Any],
                              custom_loaded: dict[str, Any],
                              ref_timing: dict[str, Any]) -> WorkerResult:
        trials = job.num_correct_trials
        recorder = self.ref_cache.recorder(cache_key) if job.reuse_reference and cached is None else None
        inputs0: tuple[dict[str, Any], int] | None = None
        ref_io = {"input_bytes": 0, "output_bytes": 0, "peak_memory_bytes": 0}
        custom_bytes = 0
        peaks = {"custom": 0}
        requested = trials
        ref_mutates = False
        audit: dict[str, Any] = {}
        try:
            await progress("checking correctness", 0.4)
            trial = 0
            while trial <= trials:  # the last one is the recheck after timing
                if trial == trials:
                    clock.lap("correctness")
                    ref_stats, custom_stats, timing = await self._time_both(
                        job, custom, checker, step, inputs0, cached, recorder, progress, clock,
                        ref_timing)
                    await progress("checking a timed sample", 0.85)
                    problem, audit = await self._audit_timed_sample(
                        job, checker, custom, step, timing.get("sets"), cached, ref_mutates)
                    if problem is not None:
                        if recorder is not None:
                            recorder.abandon()
                        return self._timed_sample_wrong(job, audit, problem, clock, ref_loaded)
                    await progress("rechecking on fresh inputs", 0.9)
                # what is still to record: this trial, those after it (the recheck
                # included) and, before timing, the timing input sets
                parts = trials - trial + (2 if trial < trials else 1)
                inputs, fd_in, mutates = await self._reference_trial(
                    checker, step, trial, cached, recorder, ref_io, parts)
                ref_mutates |= mutates
                op = "recheck" if trial == trials else "custom_trial"
                try:  # whatever goes wrong, no descriptor of GPU memory stays open here
                    c_reply, c_fds = await self._call(
                        custom, step, "custom", "running",
                        {"op": op, "trial": trial, "inputs": inputs}, [fd_in], keep_fds=True)
                    try:
                        custom_bytes = max(custom_bytes, int(c_reply.get("output_bytes", 0)))
                        peaks["custom"] = max(peaks["custom"], _peak(c_reply))
                        verdict, _ = await self._call(checker, step, "ref", "checking the output of", {
                            "op": "check", "trial": trial, "outputs": c_reply["outputs"],
                            "inputs_after": c_reply["inputs_after"], "ref_mutates": mutates,
                        }, c_fds[:1])
                    finally:
                        _close_all(c_fds)
                    if trial == 0:
                        inputs0, fd_in = (inputs, fd_in), -1  # kept for timing, closed below
                finally:
                    _close(fd_in)
                problem = verdict.get("problem")
                if problem:
                    if recorder is not None:
                        recorder.abandon()
                    verdict_result = self._incorrect(job, trial, trials, problem, clock, ref_loaded)
                    _attach_resources(verdict_result, ref_io, custom_bytes, peaks["custom"])
                    if verdict_result.kernel_exec_result is not None:
                        verdict_result.kernel_exec_result.metadata.update(
                            reference_reused=cached is not None,
                            tensor_transfer="gpu" if _on_device(inputs) else "host")
                    if verdict_result.ref_exec_result is not None:
                        verdict_result.ref_exec_result.metadata["reused"] = cached is not None
                    return verdict_result
                if trial == 0 and not _on_device(inputs):
                    trials = _trials_within_budget(trials, ref_io["input_bytes"] + custom_bytes)
                trial += 1
        except BaseException:
            if recorder is not None:
                recorder.abandon()
            raise
        finally:
            if inputs0 is not None:
                _close(inputs0[1])
        if recorder is not None:
            recorder.finish(ref_stats_raw=timing["ref_raw"], meta=ref_io)
        clock.lap("correctness")
        ref_result = KernelExecResult(outcome=Outcome.SUCCESS, compiled=True, correctness=True,
                                      metadata=self._metadata(job, ref_loaded))
        ref_result.metadata["reused"] = cached is not None
        ref_result.metadata["resources"] = _resources(timing.get("ref_reply", {}),
                                                      ref_io["input_bytes"], ref_io["output_bytes"])
        # the reference was timed first: its correctness trials may have needed more
        ref_result.metadata["resources"]["peak_memory_bytes"] = max(
            int(ref_result.metadata["resources"].get("peak_memory_bytes") or 0),
            ref_io["peak_memory_bytes"])
        result = KernelExecResult(outcome=Outcome.SUCCESS, compiled=True, correctness=True,
                                  metadata=self._metadata(job, custom_loaded))
        result.metadata["resources"] = _resources(timing.get("custom_reply", {}),
                                                  ref_io["input_bytes"], custom_bytes)
        result.metadata["reference_reused"] = cached is not None
        result.metadata["correctness_trials"] = trials
        result.metadata["tensor_transfer"] = "gpu" if inputs0 is not None and _on_device(
            inputs0[0]) else "host"
        if trials < requested:
            result.metadata["correctness_trials_note"] = (
                f"{trials} of the {requested} requested correctness trials: each moves "
                f"{(ref_io['input_bytes'] + custom_bytes) / 2**30:.1f} GiB between the processes, "
                f"and a job moves at most {CORRECTNESS_BYTES_BUDGET / 2**30:.0f} GiB")
        ref_result.runtime_stats, ref_result.runtime = ref_stats.stats, ref_stats.stats.mean
        ref_result.integrity = ref_stats.report
        ref_result.metadata["timing_figures"] = ref_stats.figures
        result.runtime_stats, result.runtime = custom_stats.stats, custom_stats.stats.mean
        result.integrity = custom_stats.report
        result.metadata["timing_figures"] = custom_stats.figures
        _attach_gpu_state(ref_result, timing.get("ref_reply", {}))
        _attach_gpu_state(result, timing.get("custom_reply", {}))
        result.integrity.checks += [
            "verdict by a separate process that never imported the kernel",
            "inputs unchanged after every call", "outputs rechecked on fresh inputs after timing",
        ]
        result.metadata["timed_sample_audit"] = audit
        if audit.get("audited"):
            result.integrity.checks.append(AUDIT_CHECK)
        elif not audit.get("expected"):
            result.integrity.suspicious = True
            result.integrity.reasons.append(
                f"no timed sample could be checked: {audit.get('reason')}")
        speedup = (ref_stats.stats.median / custom_stats.stats.median
                   if custom_stats.stats.median > 0 else None)
        result.metadata["speedup"] = speedup
        result.metadata["speedup_statistic"] = "median"
        result.integrity = integrity.flag_speedup(result.integrity, speedup,
                                                  self.settings.speedup_review_threshold)
        return WorkerResult(kernel_exec_result=result, ref_exec_result=ref_result)

    async def _time(self, job: WorkerJob, worker: Worker, step: JobStep, role: str,
                    ref_wall: tuple[dict[str, Any], float] | None = None
                    ) -> tuple[dict[str, Any], float]:
        """One side's ``time`` op: (reply, server wall ms), measured once more if its
        independent measures disagreed, or (given the reference's report and wall,
        ``ref_wall``) the server's clock did not account for its report.

        A disagreement is what a cheat looks like, and also what an honest microsecond kernel
        looks like while another process on its GPU is busy (a replacement worker creating its
        CUDA context). Such interference passes; a cheat does not: the second run is made on
        a settled GPU (no worker starting, none started meanwhile) and its verdict stands.

        Every timing is made with the GPU's spares settled (those starting are up first, no
        other starts meanwhile, the last job's processes gone): a context created beside a
        timing slows it without a trace in its cross-checks, and a reference so slowed makes
        a false speedup.
        """
        message = {"op": "time", "num_trials": job.num_trials}
        # waiting spends the job's time: at most a quarter of what is left of it
        left = step.time_left() if step.deadline is not None else TIMING_SETTLE_S
        settle = min(TIMING_SETTLE_S, max(0.0, left * TIMING_SETTLE_SHARE))
        reply, wall_ms = await self._settled_call(job, worker, step, role, message, settle)
        try:
            first = integrity.assess(reply.get("timing"), job.num_trials, self.device)
        except integrity.ImplausibleReport:
            return reply, wall_ms  # the caller's verdict; measuring again would not help
        if ref_wall is not None:  # a context created beside the call stalls it too
            integrity.check_wall_clock(first.report, reply["timing"], wall_ms, *ref_wall)
        why = first.worth_measuring_again()
        if not why:
            return reply, wall_ms
        again, wall_ms = await self._settled_call(job, worker, step, role, message,
                                                  SETTLE_BEFORE_REMEASURE_S)
        if isinstance(again.get("timing"), dict):
            again["timing"]["remeasured"] = "; ".join(why)[:500]
        return again, wall_ms

    async def _settled_call(self, job: WorkerJob, worker: Worker, step: JobStep, role: str,
                            message: dict[str, Any], settle: float) -> tuple[dict[str, Any], float]:
        """A timing call on a settled GPU: the workers starting up first (waited for before
        taking the GPU, so other jobs' untimed requests go on meanwhile), then the GPU to the
        job alone, no worker starting or leaving (at most ``settle`` seconds of waiting for
        those)."""
        if self.device != "cuda":
            return await self._sampled_call(job, worker, step, role, message)
        key = self._job_key(job)
        until = time.monotonic() + settle
        await self.workers.settled(key, settle)
        async with self._alone(step), \
                self.workers.quiet(key, max(0.0, until - time.monotonic())):
            return await self._sampled_call(job, worker, step, role, message)

    async def _sampled_call(self, job: WorkerJob, worker: Worker, step: JobStep, role: str,
                            message: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """A timing call with the GPU's state sampled by the server around it: (reply, wall
        ms); the state, when NVML has it, is the reply's ``gpu_state``."""
        sampler = None
        if self.device == "cuda":
            sampler = await asyncio.to_thread(self.gpu_state.sampler,
                                              self.gpu_uuids.get(job.gpu_id or 0))
        if sampler is not None:
            sampler.start()
        began = time.perf_counter()
        try:
            reply, _ = await self._call(worker, step, role, "timing", message)
        finally:
            wall_ms = (time.perf_counter() - began) * 1e3
            state = await asyncio.to_thread(sampler.stop) if sampler is not None else None
        _server_notes_only(reply)
        if state is not None:
            reply["gpu_state"] = state
        return reply, wall_ms

    async def _audit_timed_sample(self, job: WorkerJob, checker: Worker, custom: Worker,
                                  step: JobStep, sets: dict[str, Any] | None, cached: Any,
                                  ref_mutates: bool) -> tuple[str | None, dict[str, Any]]:
        """Check one timed sample's outputs against the reference on that sample's inputs.

        The custom kernel's timer kept one sample's outputs, picked after each sample ran
        (:class:`profiling.timer.SampleAudit`); the checker runs the reference on the inputs
        that sample had and compares. A kernel that computes only when checked (it can tell a
        timing loop from a check) is wrong here. Returns (problem, what the result reports).
        Nothing the custom process says decides more than which sample it kept.
        """
        reply, fds = await self._call(custom, step, "custom", "handing over a timed sample of",
                                      {"op": "audit_outputs"}, keep_fds=True)
        extra: list[int] = []  # sealed copies of stored inputs, for the checker
        try:  # the kept outputs' descriptors hold GPU memory: closed once, whatever happens
            return await self._check_kept_sample(job, checker, step, sets, cached, ref_mutates,
                                                 reply, fds, extra)
        finally:
            _close_all(fds + extra)

    async def _check_kept_sample(self, job: WorkerJob, checker: Worker, step: JobStep,
                                 sets: dict[str, Any] | None, cached: Any, ref_mutates: bool,
                                 reply: dict[str, Any], fds: list[int], extra: list[int]
                                 ) -> tuple[str | None, dict[str, Any]]:
        given = reply.get("audit")
        report: dict[str, Any] = given if isinstance(given, dict) else {}
        sample, samples = report.get("sample"), report.get("samples")
        note: dict[str, Any] = {"audited": False}
        if not fds or not isinstance(report.get("outputs"), dict) \
                or not isinstance(sample, int) or not isinstance(samples, int) \
                or not 0 <= sample < samples:
            note["reason"] = str(report.get("error") or "the kernel's process kept no timed "
                                 "sample")[:REASON_CHARS]
            return None, note
        note.update(sample=sample, samples=samples)
        message: dict[str, Any] = {"op": "audit", "outputs": report["outputs"],
                                   "plan": report.get("plan")}
        count = int(sets.get("count", 0)) if sets else 0
        if count:
            message["set"] = sample % count
            if cached is not None and cached.timing_sets is not None:
                meta, path = cached.timing_sets
                message["inputs"] = {"layout": meta["layout"], "per_set": meta["per_set"]}
                extra.append(await asyncio.to_thread(self.ref_cache.sealed_copy, path))
        elif ref_mutates:
            note.update(expected=True, reason=(
                "the kernel writes its inputs and the timed calls had no fresh input sets, so "
                "each sample started from what the one before left"))
            return None, note
        elif cached is not None and 0 in cached.trials:
            entry = cached.trials[0]
            message["inputs"] = entry.inputs
            extra.append(await asyncio.to_thread(self.ref_cache.sealed_copy, entry.inputs_path))
        verdict, _ = await self._call(checker, step, "ref", "checking a timed sample of",
                                      message, fds[:1] + extra)
        if verdict.get("problem"):
            return str(verdict["problem"]), note
        if verdict.get("skipped"):
            note.update(reason=str(verdict["skipped"])[:REASON_CHARS],
                        expected=bool(verdict.get("expected")))
            return None, note
        note["audited"] = True
        return None, note

    def _timed_sample_wrong(self, job: WorkerJob, audit: dict[str, Any], problem: str,
                            clock: Clock, ref_loaded: dict[str, Any]) -> WorkerResult:
        clock.lap("correctness")
        where = (f"timed sample {audit['sample'] + 1} of {audit['samples']} (picked after it ran) "
                 "against the reference on the same inputs")
        verdict = KernelExecResult(
            outcome=Outcome.INCORRECT, compiled=True, correctness=False,
            validation_error=f"{where}: {problem}",
            integrity=IntegrityReport(
                checks=[AUDIT_CHECK], suspicious=True,
                reasons=[("correct when checked but wrong while timed: the kernel computes "
                          "differently in a timing loop")]))
        verdict.metadata["timed_sample_audit"] = audit
        ref = KernelExecResult(outcome=Outcome.SUCCESS, compiled=True,
                               metadata=self._metadata(job, ref_loaded))
        return WorkerResult(kernel_exec_result=verdict, ref_exec_result=ref)

    async def _reference_trial(self, checker: Worker, step: JobStep, trial: int,
                               cached: Any, recorder: Any, ref_io: dict[str, int], parts: int
                               ) -> tuple[dict[str, Any], int, bool]:
        """The reference's trial: inputs (as a sealed file) from a run or from the cache.

        A run the server records for reuse sends the trial through host memory when it fits
        its share of the entry (``parts`` things are still to record): a reference too large
        to store whole is not half-recorded first (host copies and disk writes for nothing);
        its tensors cross in GPU memory from the first trial on.
        """
        if cached is not None and trial in cached.trials:
            entry = cached.trials[trial]
            fd_in = await asyncio.to_thread(self.ref_cache.sealed_copy, entry.inputs_path)
            try:
                fd_out = await asyncio.to_thread(self.ref_cache.sealed_copy, entry.outputs_path)
                try:
                    await self._call(checker, step, "ref", "loading the stored outputs of", {
                        "op": "cached_trial", "trial": trial, "outputs": entry.outputs,
                        "mutates": entry.mutates, "input_prints": entry.input_prints}, [fd_out])
                finally:
                    os.close(fd_out)
            except BaseException:
                _close(fd_in)
                raise
            ref_io["input_bytes"] = max(ref_io["input_bytes"], entry.input_bytes)
            ref_io["output_bytes"] = max(ref_io["output_bytes"], entry.output_bytes)
            return entry.inputs, fd_in, entry.mutates
        room = recorder.room() // max(1, parts) if recorder is not None else 0
        reply, fds = await self._call(checker, step, "ref", "running", {
            "op": "ref_trial", "trial": trial, "record_up_to": room}, keep_fds=True)
        ref_io["peak_memory_bytes"] = max(ref_io["peak_memory_bytes"], _peak(reply))
        ref_io["input_bytes"] = max(ref_io["input_bytes"], int(reply.get("input_bytes", 0)))
        ref_io["output_bytes"] = max(ref_io["output_bytes"], int(reply.get("output_bytes", 0)))
        try:
            if recorder is not None:
                # Only what came through host memory can be stored; a larger reference runs
                # again.
                if len(fds) == 2 and not _on_device(reply["inputs"]):
                    await asyncio.to_thread(recorder.add_trial, trial, reply, fds[0], fds[1])
                else:
                    recorder.abandon()
        except BaseException:
            _close_all(fds)
            raise
        _close_all(fds[1:])
        return reply["inputs"], fds[0], bool(reply.get("mutates"))

    async def _time_both(self, job: WorkerJob, custom: Worker, checker: Worker, step: JobStep,
                         inputs0: tuple[dict[str, Any], int] | None, cached: Any, recorder: Any,
                         progress: ProgressFn, clock: Clock, ref_timing: dict[str, Any]
                         ) -> tuple[integrity.TimingVerdict, integrity.TimingVerdict, dict[str, Any]]:
        """The custom kernel's timing beside the reference's (timed before it was loaded)."""
        ref_raw, ref_reply, ref_verdict = ref_timing["raw"], ref_timing["reply"], ref_timing["verdict"]
        await progress("timing the kernel", 0.75)
        assert inputs0 is not None
        sets_meta, sets_fd = await self._timing_sets(job, checker, step, inputs0[0], cached, recorder)
        try:
            await self._call(custom, step, "custom", "preparing to time", {
                "op": "prepare_timing", "inputs": inputs0[0], "timing_sets": sets_meta},
                [inputs0[1]] + ([sets_fd] if sets_fd is not None else []))
        finally:
            if sets_fd is not None:
                os.close(sets_fd)
        # On a shared CPU the host's own load moves these walls by more than a kernel's
        # samples; the check is kept for GPU hosts, where a slot has its cores to itself.
        ref_wall = ((ref_raw, float(ref_raw["server_wall_ms"]))
                    if self.device == "cuda" and isinstance(ref_raw, dict)
                    and "server_wall_ms" in ref_raw else None)
        custom_reply, custom_wall_ms = await self._time(job, custom, step, "custom", ref_wall)
        warm = float(custom_reply.get("timing", {}).get("warmup_ms", 0.0) or 0.0)
        clock.lap("timing")
        clock.add("warmup", warm)
        clock.add("timing", -warm)
        try:
            custom_verdict = integrity.assess(custom_reply.get("timing"), job.num_trials, self.device)
        except integrity.ImplausibleReport as exc:
            raise KernelFailed("custom", KernelExecResult(
                outcome=Outcome.RUNTIME_ERROR, compiled=True, correctness=True,
                runtime_error=f"its timing report is not plausible ({exc}); "
                "the kernel's code must have interfered with the timer")) from exc
        if ref_wall is not None:
            integrity.check_wall_clock(custom_verdict.report, custom_reply["timing"],
                                       custom_wall_ms, *ref_wall)
        return ref_verdict, custom_verdict, {"ref_raw": ref_raw, "ref_reply": ref_reply,
                                             "custom_reply": custom_reply, "sets": sets_meta}

    async def _timing_sets(self, job: WorkerJob, checker: Worker, step: JobStep,
                           inputs: dict[str, Any], cached: Any, recorder: Any
                           ) -> tuple[dict[str, Any] | None, int | None]:
        """Fresh input sets for the custom kernel's samples, made by the checker."""
        if cached is not None:
            if cached.timing_sets is None:
                return None, None
            meta, path = cached.timing_sets
            return meta, await asyncio.to_thread(self.ref_cache.sealed_copy, path)
        set_bytes = max(1, sum(int(e["nbytes"]) for e in inputs.get("layout", [])))
        count = min(job.num_trials or MAX_SAMPLES, TIMING_SET_BYTES // set_bytes)
        if count < 2:
            return None, None
        record = recorder is not None and recorder.room() >= count * set_bytes
        reply, fds = await self._call(checker, step, "ref", "making timing inputs for",
                                      {"op": "timing_inputs", "count": count, "host": record},
                                      keep_fds=True)
        try:
            meta = {"layout": reply["layout"], "per_set": reply["per_set"],
                    "count": reply["count"]}
            if recorder is not None:
                if record and not _on_device(meta):
                    await asyncio.to_thread(recorder.add_blob, "timing_sets", meta, fds[0])
                else:
                    recorder.abandon()
        except BaseException:
            _close_all(fds)
            raise
        return meta, fds[0]

    async def _device_metrics(self, job: WorkerJob, slot: Slot, result: WorkerResult,
                              timeout: float) -> None:
        """Nsight Compute metrics of the job's kernels, in a pass of their own under ncu.

        With the GPU to itself (ncu's replays must not overlap another job's timing, nor
        another job's work the replays'), after the timed pass: no figure the job reports is
        taken under ncu.
        """
        from profiling.device_metrics import device_metrics_layout
        from profiling.ncu import collect_device_metrics

        work_dir = Path(job.work_dir)
        request = work_dir / "request.json"
        env = dict(self.workers.zygote_env(self.pool_key(slot)))
        env.pop("KES_ZYGOTE_CONFIG", None)
        env["KES_DEVICE"] = "cuda"

        async def collect(role: str) -> Any:
            return await collect_device_metrics(
                request, role, work_dir, self.settings, preset=job.device_metrics_preset,
                lock_clocks=job.lock_clocks, timeout_s=max(30.0, timeout), wrap=_ncu_sandbox,
                env=env)

        kernel = result.kernel_exec_result
        assert kernel is not None
        if job.kind == "compare" and result.ref_exec_result is not None:
            ref_metrics = await collect("ref")
            custom_metrics = await collect("custom")
            result.ref_exec_result.metadata["device_metrics"] = device_metrics_layout(ref_metrics)
            kernel.metadata["device_metrics"] = device_metrics_layout(ref_metrics, custom_metrics)
        else:
            kernel.metadata["device_metrics"] = device_metrics_layout(await collect("kernel"))

    def _apply_timing(self, result: KernelExecResult, raw: Any, requested: int | None,
                      clock: Clock) -> None:
        warm = float((raw or {}).get("warmup_ms", 0.0) or 0.0) if isinstance(raw, dict) else 0.0
        clock.lap("timing")
        clock.add("warmup", warm)
        clock.add("timing", -warm)
        try:
            verdict = integrity.assess(raw, requested, self.device)
        except integrity.ImplausibleReport as exc:
            result.outcome = Outcome.RUNTIME_ERROR
            result.runtime_error = (f"its timing report is not plausible ({exc}); "
                                    "the kernel's code must have interfered with the timer")
            return
        result.runtime_stats, result.runtime = verdict.stats, verdict.stats.mean
        result.integrity = verdict.report
        result.metadata["timing_figures"] = verdict.figures

    def _incorrect(self, job: WorkerJob, trial: int, trials: int, problem: str, clock: Clock,
                   ref_loaded: dict[str, Any]) -> WorkerResult:
        clock.lap("correctness")
        if trial == trials:
            where = ("after timing, on fresh inputs copied into the same buffers (a kernel that "
                     "caches its outputs fails here)")
        else:
            where = f"correctness trial {trial + 1} of {trials}"
        verdict = KernelExecResult(outcome=Outcome.INCORRECT, compiled=True, correctness=False,
                                   validation_error=f"{where}: {problem}")
        if trial == trials:
            verdict.integrity = IntegrityReport(
                checks=["outputs rechecked on fresh inputs after timing"], suspicious=True,
                reasons=["correct during the trials but wrong after timing: cached or stale outputs"])
        ref = KernelExecResult(outcome=Outcome.SUCCESS, compiled=True,
                               metadata=self._metadata(job, ref_loaded))
        return WorkerResult(kernel_exec_result=verdict, ref_exec_result=ref)

    def _metadata(self, job: WorkerJob, loaded: dict[str, Any]) -> dict[str, Any]:
        meta: dict[str, Any] = {"device": self.device, "gpu_id": job.gpu_id}
        if self.device == "cuda":
            meta["gpu_type"] = self.gpu_types.get(job.gpu_id or 0)
        else:
            meta["gpu_type"] = None
            meta["timing_note"] = "CPU mode: timings are CPU wall-clock times, not GPU times"
        meta["device_metrics"] = None
        if loaded.get("artifacts"):
            meta["artifacts"] = loaded["artifacts"]
        return meta

    # ---- endings without a verdict from the worker

    def _timed_out(self, job: WorkerJob, timeout: float, step: JobStep) -> WorkerResult:
        message = f"Evaluation timed out after {timeout:g} seconds (while {step.describe()})"
        verdict = KernelExecResult(outcome=Outcome.TIMEOUT, compiled=step.what != "compiling",
                                   runtime_error=message)
        if job.kind == "compare" and step.role == "ref":
            return WorkerResult(state=JobState.TIMED_OUT, error=message,
                                ref_exec_result=verdict,
                                kernel_exec_result=KernelExecResult(outcome=Outcome.NOT_RUN))
        return WorkerResult(state=JobState.TIMED_OUT, error=message, kernel_exec_result=verdict)

    async def _crashed(self, job: WorkerJob, step: JobStep, held: list[Worker]) -> WorkerResult:
        for worker in held:
            worker.kill()
        statuses = await asyncio.gather(*(w.exit_status(5) for w in held))
        how = "died"
        for status in statuses:
            if status is not None and (os.WIFSIGNALED(status) or os.WEXITSTATUS(status) != 0):
                how = _describe_status(status)
                break
        message = f"the worker process {how} while {step.describe()}"
        compiled = step.what not in ("compiling", "building", "starting")
        verdict = KernelExecResult(
            outcome=Outcome.RUNTIME_ERROR if compiled else Outcome.COMPILE_ERROR, compiled=compiled,
            runtime_error=message if compiled else None,
            compilation_error=None if compiled else message,
        )
        if job.kind == "compare" and step.role == "ref":
            return WorkerResult(ref_exec_result=verdict, error="the reference kernel crashed the worker",
                                kernel_exec_result=KernelExecResult(outcome=Outcome.NOT_RUN))
        return WorkerResult(kernel_exec_result=verdict)


FAILURE_OUTCOMES = {Outcome.COMPILE_ERROR, Outcome.RUNTIME_ERROR}


def _attach_gpu_state(result: KernelExecResult, reply: dict[str, Any]) -> None:
    """The GPU's state while this side was timed (see profiling.gpu_state), where sampled."""
    if reply.get("gpu_state") is not None:
        result.metadata["gpu_state"] = reply["gpu_state"]


def _server_notes_only(reply: dict[str, Any]) -> None:
    """Drop what only the server may write into a timing report from a worker's reply."""
    reply.pop("gpu_state", None)
    if isinstance(reply.get("timing"), dict):
        reply["timing"].pop("remeasured", None)


def _on_device(described: dict[str, Any]) -> bool:
    """Whether a worker's tensors (``{"layout": [...]}``) crossed in GPU memory.

    ``validation.transfer.on_device`` is the receiving worker's strict reading; this server
    process never imports torch (or transfer), and only needs to know what it may store.
    """
    layout = described.get("layout") or []
    return bool(layout) and all(e.get("where") == "device" for e in layout)


def _trials_within_budget(trials: int, bytes_per_trial: int) -> int:
    """How many of ``trials`` correctness trials fit :data:`CORRECTNESS_BYTES_BUDGET`."""
    if bytes_per_trial <= 0 or trials <= MIN_CORRECT_TRIALS:
        return trials
    return max(MIN_CORRECT_TRIALS, min(trials, CORRECTNESS_BYTES_BUDGET // bytes_per_trial))


def _out_of_gpu_memory(result: WorkerResult) -> bool:
    """Whether a side of the job failed for want of GPU memory (see
    LocalExecutor._again_with_the_gpu_to_itself)."""
    for verdict in (result.kernel_exec_result, result.ref_exec_result):
        if verdict is not None and verdict.outcome in FAILURE_OUTCOMES:
            text = f"{verdict.runtime_error or ''} {verdict.compilation_error or ''}"
            if any(marker in text for marker in OUT_OF_MEMORY_MARKERS):
                return True
    return False


def _succeeded(result: WorkerResult) -> bool:
    verdict = result.kernel_exec_result
    return result.error is None and verdict is not None and verdict.outcome == Outcome.SUCCESS


def _ncu_sandbox(command: list[str]) -> list[str]:
    """The ncu pass runs user code too: fresh pid, network and IPC namespaces where possible.

    It cannot use the fork-based sandbox (ncu must launch its target), so it uses util-linux's
    ``unshare``; without it the command runs as is, and the result's isolation says so.
    """
    import shutil

    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        return command
    return [unshare, "--pid", "--fork", "--mount-proc", "--net", "--ipc", "--kill-child", "--",
            *command]


def _failure_only(payload: Any) -> KernelExecResult:
    """A worker's word that its kernel failed. Only failures are taken from a worker (a
    kernel may fail itself); success is decided here, so a claimed success is a violation."""
    try:
        result = KernelExecResult.model_validate(payload)
    except ValueError:
        result = None
    if result is None or result.outcome not in FAILURE_OUTCOMES:
        return KernelExecResult(
            outcome=Outcome.RUNTIME_ERROR, compiled=True,
            runtime_error="the worker answered with something it may not say (a verdict of its "
                          "own making); the kernel's code must have written to the worker's channel")
    result.correctness = None if result.correctness is None else False
    result.runtime_stats, result.runtime, result.integrity = None, 0.0, None
    return result


def _needs_build(job: WorkerJob) -> bool:
    kernels = [job.kernel, job.ref_kernel]
    return any(k is not None and k.kernel_type in BUILD_TYPES for k in kernels)


def _kernel_verdict(job: WorkerJob, role: str, verdict: KernelExecResult) -> WorkerResult:
    if job.kind == "compare" and role == "ref":
        what = "compile" if verdict.outcome == Outcome.COMPILE_ERROR else "run"
        return WorkerResult(ref_exec_result=verdict, error=f"the reference kernel failed to {what}",
                            kernel_exec_result=KernelExecResult(outcome=Outcome.NOT_RUN))
    return WorkerResult(kernel_exec_result=verdict)


def _peak(reply: dict[str, Any]) -> int:
    return int((reply.get("resources") or {}).get("peak_memory_bytes", 0) or 0)


def _attach_resources(result: WorkerResult, ref_io: dict[str, int], custom_bytes: int,
                      custom_peak: int) -> None:
    """Resources of both sides on an early verdict (sizes and peaks seen in the trials)."""
    if result.kernel_exec_result is not None:
        result.kernel_exec_result.metadata["resources"] = {
            "peak_memory_bytes": custom_peak, "input_bytes": ref_io["input_bytes"],
            "output_bytes": custom_bytes}
    if result.ref_exec_result is not None:
        result.ref_exec_result.metadata["resources"] = {
            "peak_memory_bytes": ref_io.get("peak_memory_bytes", 0),
            "input_bytes": ref_io["input_bytes"], "output_bytes": ref_io["output_bytes"]}


def _resources(reply: dict[str, Any], input_bytes: Any, output_bytes: Any) -> dict[str, Any]:
    out = dict(reply.get("resources") or {})
    out["input_bytes"] = int(input_bytes or 0)
    out["output_bytes"] = int(output_bytes or 0)
    return out


def _describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        with suppress(ValueError):
            return f"was killed by signal {signal.Signals(sig).name}"
        return f"was killed by signal {sig}"
    code = os.WEXITSTATUS(status)
    return f"exited with code {code} without answering (os._exit or sys.exit in kernel code?)"


def _close(fd: int) -> None:
    with suppress(OSError):
        os.close(fd)


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        _close(fd)
