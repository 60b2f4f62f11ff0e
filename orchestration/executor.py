"""Executors run one job and return its typed result; the local one runs jobs on this host.

:class:`Executor` is everything the job manager sees: ``run(job) -> WorkerResult`` and a
typed :class:`ExecutorStatus` for ``/health``, ``/stats`` and ``/metrics``. The
:class:`LocalExecutor` is wiring:

1. **Build stage** (:mod:`orchestration.build_stage`): torch_cuda sources are built on the
   CPU before any GPU is taken; a failing build is the verdict.
2. **A device slot** and its :class:`~orchestration.placement.Seat`
   (:mod:`orchestration.placement`); the job's timeout runs from here.
3. **The flow** (:mod:`orchestration.flows`): evaluate/validate, or compare with the
   reference side (:mod:`orchestration.references`).
4. **The result** (:mod:`orchestration.verdicts`), from the flow's facts or from how the job
   ended otherwise: a worker that died, a job past its deadline, a side out of GPU memory (run
   once more with the GPU to itself); then device metrics (a pass of their own under ncu).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from orchestration import verdicts
from orchestration.build_stage import BuildStage
from orchestration.facts import Facts
from orchestration.fits import too_big_for_the_host
from orchestration.flows.compare import ReferenceSide, compare
from orchestration.flows.evaluate import evaluate
from orchestration.gpu_pool import Slot
from orchestration.job_step import Clock, JobStep
from orchestration.output_capture import OutputCapture
from orchestration.placement import LocalSeat, Placement, ProtocolViolation, WorkerFault
from orchestration.ref_cache import ReferenceFigures
from orchestration.references import Judges
from orchestration.worker import Worker, WorkerDied
from orchestration.worker_pool import DEPART_TIMEOUT_S
from shared.job_files import write_atomic
from shared.models import ClusterInfo, GPUInfo, KernelType, WorkerJob, WorkerResult
from shared.settings import Settings

log = logging.getLogger("kernel_eval.executor")

ProgressFn = Callable[[str, float], Awaitable[None]]
# A job that ran out of GPU memory runs again with the GPU to itself when this much of its
# time is left (LocalExecutor._again_alone).
MEMORY_RETRY_MIN_S = 5.0


@dataclass
class ExecutorStatus:
    """A snapshot of an executor, for /health, /stats and /metrics."""

    queue_length: int = 0
    isolation: str = "none"
    isolation_detail: str = ""
    worker_slots: int = 0
    utilization_pct: float = 0.0
    busy_shares: dict[str, float] = field(default_factory=dict)  # device label -> share
    workers_starting: int = 0
    workers_ready: int = 0
    cache: dict[str, dict[str, int]] = field(default_factory=dict)
    cluster: ClusterInfo | None = None


class Executor(Protocol):
    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def run(self, job: WorkerJob, timeout: float, progress: ProgressFn) -> WorkerResult:
        """Run ``job`` to its verdict (or timeout); never raises for a kernel's fault."""
        ...

    def status(self) -> ExecutorStatus: ...


Flow = Callable[[WorkerJob, LocalSeat], Awaitable[Facts]]


class LocalExecutor:
    """The jobs of this host's devices (see the module docstring). ``flows`` replaces the flow
    of a job kind (``evaluate``, ``validate``, ``compare``): tests pass fakes."""

    def __init__(self, settings: Settings, device: str, slots: list[Slot],
                 gpus: list[GPUInfo], extra_env: dict[str, str] | None = None,
                 flows: dict[str, Flow] | None = None) -> None:
        self.settings = settings
        self.device = device
        self.placement = Placement(settings, device, slots, gpus, extra_env)
        self.builds = BuildStage(self.placement.workers, settings.build_workers)
        self.references = ReferenceSide(
            judges=Judges(self.placement),
            figures=ReferenceFigures(settings.ref_cache_dir, settings.ref_cache_bytes),
            review_threshold=settings.speedup_review_threshold)
        self.placement.idle_with_user_code = self.references.judges.idle_workers
        self.flows: dict[str, Flow] = {"evaluate": evaluate, "validate": evaluate,
                                       "compare": self._compare, **(flows or {})}
        self._logs_saved: dict[str, asyncio.Event] = {}

    async def start(self) -> None:
        await self.placement.start()

    async def close(self) -> None:
        self.references.judges.close()
        await self.placement.close()

    def status(self) -> ExecutorStatus:
        workers, slots = self.placement.workers, self.placement.slots
        figures, judges = self.references.figures, self.references.judges
        return ExecutorStatus(
            queue_length=slots.waiting(), isolation=workers.isolation,
            isolation_detail=workers.isolation_detail, worker_slots=len(slots.slots),
            utilization_pct=round(slots.utilization_pct(), 2),
            busy_shares={(str(s.gpu_id) if s.gpu_id is not None else f"cpu{s.index}"): share
                         for s, share in slots.busy_shares().items()},
            workers_starting=workers.starting_count(), workers_ready=workers.ready_count(),
            cache={"reference": {"hits": figures.hits, "lookups": figures.lookups},
                   "judge": {"hits": judges.hits, "lookups": judges.lookups},
                   "build": dict(self.builds.stats), "jit": self.placement.jit.stats()})

    # ---- one job

    async def run(self, job: WorkerJob, timeout: float, progress: ProgressFn) -> WorkerResult:
        clock, step = Clock(), JobStep()
        result: WorkerResult | None = None
        seat: LocalSeat | None = None
        try:
            too_big = too_big_for_the_host(job, self.device)
            if too_big is not None:
                return self._finished(too_big, clock, step)
            if self.device == "cuda" and _needs_build(job):
                built = await self.builds.run(job, timeout, step, clock, progress)
                if built is not None:
                    return self._finished(built, clock, step)
            await progress("waiting for a GPU" if self.device == "cuda" else "queued", 0.05)
            slot = await self.placement.slots.acquire()
            clock.lap("queue_wait")
            step.start(timeout)
            job.gpu_id = slot.gpu_id
            job.timing_cores = self.placement.timing_cores(slot.gpu_id)
            seat = self.placement.seat(slot, step, clock, progress, slot.gpu_id)
            result = await self._on_seat(job, seat, timeout)
        except WorkerDied:
            result = await self._crashed(job, step, seat)
        except (WorkerFault, ProtocolViolation) as fault:
            result = (verdicts.worker_fault(job, fault.side, step, fault.message)
                      if isinstance(fault, WorkerFault)
                      else verdicts.protocol_violation(job, fault.side, step, fault.what))
        except Exception as exc:
            log.exception("job %s failed in the server", job.job_id)
            result = verdicts.server_fault(f"server error: {exc}")
        finally:
            if seat is not None:
                await self._leave(job, seat, result)
        assert result is not None
        return self._finished(result, clock, step)

    async def _on_seat(self, job: WorkerJob, seat: LocalSeat, timeout: float) -> WorkerResult:
        """The job's flow on its seat, within its deadline; a memory retry and device metrics
        after it where they apply."""
        try:
            result = verdicts.of(job, await self._within(self._flow(job, seat), seat.step))
            if self.device == "cuda" and result.out_of_memory \
                    and seat.step.time_left() > MEMORY_RETRY_MIN_S:
                result = await self._again_alone(job, seat)
            if job.enable_device_metrics and verdicts.succeeded(result):
                await self._device_metrics(job, seat, result, timeout)
            elif job.enable_device_metrics:
                verdicts.without_device_metrics(
                    result, self.device, "the kernel did not succeed, so it was not profiled")
        except asyncio.TimeoutError:
            result = verdicts.timed_out(job, timeout, seat.step)
        return result

    def _flow(self, job: WorkerJob, seat: LocalSeat) -> Awaitable[Facts]:
        return self.flows[job.kind](job, seat)

    def _compare(self, job: WorkerJob, seat: LocalSeat) -> Awaitable[Facts]:
        return compare(job, seat, self.references)

    async def _within(self, flow: Awaitable[Facts], step: JobStep) -> Facts:
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

    async def _again_alone(self, job: WorkerJob, seat: LocalSeat) -> WorkerResult:
        """Run a job that ran out of GPU memory once more, with the GPU to itself.

        Beside a job's processes the GPU holds the spare workers' and idle judges' contexts
        (about 1 GB each) and, for a moment, the last job's processes on their way out. A
        multi-GB problem that met them is not a problem that does not fit: it gets a second
        attempt once those are gone and none is starting, and only that attempt stands.
        """
        workers = self.placement.workers
        await seat.until_no_one_alone()
        own = [w for w in seat.held if w not in seat.borrowed]
        workers.dismiss(seat.key, own)
        for worker in own:
            seat.held.remove(worker)
        await seat.progress("out of GPU memory: running again with the GPU to itself", 0.5)
        async with workers.quiet(seat.key, DEPART_TIMEOUT_S), seat.alone():
            shed = workers.shed(seat.key) + self.references.judges.shed(seat.key)
            await workers.departed(seat.key, DEPART_TIMEOUT_S)
            seat.clock.lap("memory_retry_wait")
            result = verdicts.of(job, await self._within(self._flow(job, seat), seat.step))
        verdicts.retried_alone(result, shed)
        return result

    async def _device_metrics(self, job: WorkerJob, seat: LocalSeat, result: WorkerResult,
                              timeout: float) -> None:
        """Nsight Compute metrics of the job's kernels, in a pass of their own under ncu,
        with the GPU to itself, after the timed pass: no figure the job reports is taken
        under ncu."""
        if self.device != "cuda":
            verdicts.without_device_metrics(
                result, self.device, "device metrics need a CUDA GPU; this server runs in CPU mode")
            return
        from profiling.device_metrics import DeviceMetricsResult, device_metrics_layout
        from profiling.ncu import collect_device_metrics

        await seat.progress("collecting device metrics", 0.92)
        work_dir = Path(job.work_dir)
        request = work_dir / "request.json"
        env = dict(self.placement.workers.zygote_env(seat.key))
        env.pop("KES_ZYGOTE_CONFIG", None)
        env["KES_DEVICE"] = "cuda"

        async def collect(role: str) -> DeviceMetricsResult:
            return await collect_device_metrics(
                request, role, work_dir, self.settings, preset=job.device_metrics_preset,
                lock_clocks=job.lock_clocks, timeout_s=max(30.0, timeout), wrap=_ncu_sandbox,
                env=env)

        async with seat.alone():  # ncu's replays beside nothing else
            if job.kind == "compare" and result.ref_exec_result is not None:
                ref_metrics = await collect("ref")
                custom_metrics = await collect("custom")
                verdicts.with_device_metrics(result, device_metrics_layout(ref_metrics,
                                                                           custom_metrics),
                                             reference=device_metrics_layout(ref_metrics),
                                             measured=(custom_metrics, ref_metrics))
            else:
                metrics = await collect("kernel")
                verdicts.with_device_metrics(result, device_metrics_layout(metrics),
                                             measured=(metrics, None))
        seat.clock.lap("device_metrics")

    # ---- endings

    async def _crashed(self, job: WorkerJob, step: JobStep, seat: LocalSeat | None) -> WorkerResult:
        held = list(seat.held) if seat is not None else []
        for worker in held:
            worker.kill()
        statuses = await asyncio.gather(*(w.exit_status(5) for w in held))
        return verdicts.crashed(job, step, list(statuses), _host_oom(held))

    async def _leave(self, job: WorkerJob, seat: LocalSeat, result: WorkerResult | None) -> None:
        """Let the job's workers go (not while another job has the device alone: a context's
        teardown disturbs a timing), free its slot, keep their output as the job's log."""
        try:
            await seat.until_no_one_alone()
        finally:  # cancelled while waiting, too: the slot is never lost
            gone = seat.leave()
        if verdicts.succeeded(result):
            # A good job does not wait for its processes' teardown (their CUDA contexts): its
            # log is written a moment after the answer.
            self.placement.workers.background(self._keep_output(job, gone, seat.outputs, None))
        else:
            await self._keep_output(job, gone, seat.outputs, result)

    async def _keep_output(self, job: WorkerJob, held: list[Worker],
                           lent: list[tuple[str, OutputCapture]],
                           result: WorkerResult | None) -> None:
        """The job's workers' output (and what lent workers printed for it) as its log."""
        await asyncio.gather(*(w.exit_status(5) for w in held))
        await asyncio.gather(*(w.output_drained() for w in held))
        parts = [(label, out) for label, out in lent if out.total_bytes]
        parts += [(w.label, w.output) for w in held if w.output.total_bytes]
        if parts and job.work_dir:
            text = "".join(f"===== {label} =====\n{out.text()}\n" for label, out in parts) \
                if len(parts) > 1 else parts[0][1].text()
            await asyncio.to_thread(write_atomic, Path(job.work_dir) / "worker.log", text)
            verdicts.with_output_tail(
                result, [out.tail(verdicts.OUTPUT_TAIL_BYTES) for _, out in parts])
        for worker in held:
            self.placement.workers.release(worker)
        self._logs_saved.setdefault(job.job_id, asyncio.Event()).set()

    async def log_saved(self, job_id: str, timeout: float) -> None:
        """Return once the job's worker log is written (a good job's comes a moment after its
        answer, once its workers have exited), or after ``timeout``."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._logs_saved.setdefault(job_id, asyncio.Event()).wait(),
                                   timeout)
        self._logs_saved.pop(job_id, None)

    def _finished(self, result: WorkerResult, clock: Clock, step: JobStep) -> WorkerResult:
        result.stage_timings = clock.done()
        verdicts.with_worker_calls(result, step)
        return result


def _needs_build(job: WorkerJob) -> bool:
    kernels = [job.kernel, job.ref_kernel]
    return any(k is not None and k.kernel_type == KernelType.TORCH_CUDA for k in kernels)


def _host_oom(held: list[Worker]) -> str:
    """What to add to a crash that looks like the host's OOM killer's doing: a SIGKILL the
    server did not send, and how much host memory the process had used."""
    for worker in held:
        status = worker.status
        if status is not None and os.WIFSIGNALED(status) \
                and os.WTERMSIG(status) == signal.SIGKILL and not worker.killed:
            total = _host_memory_bytes()
            of = f" of the host's {total / 2**30:.1f} GiB" if total else ""
            return (f"; the server did not send that SIGKILL: the host most likely ran out of "
                    f"memory and its OOM killer (which takes job processes first) ended it, "
                    f"after it had used {worker.max_rss_bytes / 2**30:.2f} GiB{of}")
    return ""


def _host_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def _ncu_sandbox(command: list[str]) -> list[str]:
    """The ncu pass runs user code too: fresh pid, network and IPC namespaces where possible.

    It cannot use the fork-based sandbox (ncu must launch its target), so it uses util-linux's
    ``unshare``; without it the command runs as is, and the result's isolation says so.
    """
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        return command
    return [unshare, "--pid", "--fork", "--mount-proc", "--net", "--ipc", "--kill-child", "--",
            *command]
