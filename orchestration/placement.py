"""Where a job runs, and the handle its flow drives: device slots, GPU gates, ready workers.

:class:`Placement` owns what jobs share on this host: the device slots (``JOBS_PER_GPU`` per
GPU, ``MAX_WORKERS`` CPU slots), one gate per device (untimed requests share it, a timing has
it alone, :mod:`orchestration.gpu_gate`), the worker pool and the GPU-state sampler. A job
that got a slot gets a :class:`Seat`: the small typed handle its flow
(:mod:`orchestration.flows`) is written against, and which unit tests replace with a fake.

What a seat does for a flow:

- :meth:`Seat.take` a ready worker (sandboxed, CUDA context made) for the job, as its source
  needs (:class:`orchestration.worker_kinds.Needs`: one made for it where its code may use
  several streams, one that warmed cuBLAS where it may call it);
- :meth:`Seat.call` one request, as a shared user of the device: the reply is the model the
  flow expects, or the step ends in :class:`KernelFailed` (the kernel's own failure, data),
  :class:`WorkerFault` (the harness's) or :class:`ProtocolViolation`;
- :meth:`Seat.timed` a request that measures: on a *settled* device (workers starting are up
  first and none starts meanwhile, the last job's processes gone), with the device to the
  job alone (the other jobs' processes stopped), the GPU's state sampled by the server
  around it. On the CPU the same holds: one timing at a time, the other jobs stopped.

Everything a seat observes (its wall clock, the GPU's state) is returned beside the reply,
never written into it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from orchestration.gpu_gate import GpuGates, freeze, thaw
from orchestration.gpu_pool import DevicePool, Slot
from orchestration.jit_store import JitStore, environment_fingerprint
from orchestration.job_step import Clock, JobStep, Side, Stage
from orchestration.output_capture import OutputCapture
from orchestration.worker import Worker, WorkerDied
from orchestration.worker_kinds import UNKNOWN_SOURCE, Needs
from orchestration.worker_pool import PoolKey, WorkerPool
from profiling.gpu_state import GpuState
from shared.models import GPUInfo
from shared.protocol import Failure, InternalError, Message
from shared.settings import Settings

log = logging.getLogger("kernel_eval.placement")

R = TypeVar("R", bound=Message)
ProgressFn = Callable[[str, float], Awaitable[None]]

# Before any timing: at most this long for the device's starting workers to be up and its last
# job's processes to be gone, and at most this share of the job's remaining time.
TIMING_SETTLE_S = 10.0
TIMING_SETTLE_SHARE = 0.25
# Before measuring again after a first reading was disturbed.
SETTLE_BEFORE_REMEASURE_S = 5.0
# Before timing a reference: at most this long for the last job's workers to be gone.
DEPARTED_WAIT_S = 2.0


class KernelFailed(Exception):
    """A worker answered with its kernel's failure (a verdict, not a fault)."""

    def __init__(self, side: Side, failure: Failure) -> None:
        super().__init__(failure.message[:200])
        self.side = side
        self.failure = failure


class WorkerFault(Exception):
    """A worker reported a fault of the harness (see :func:`verdicts.worker_fault`)."""

    def __init__(self, side: Side, message: str) -> None:
        super().__init__(message[:200])
        self.side = side
        self.message = message


class ProtocolViolation(Exception):
    """A worker answered with a message that is not what its request allows."""

    def __init__(self, side: Side, what: str) -> None:
        super().__init__(what)
        self.side = side
        self.what = what


@dataclass
class Observed:
    """What the server saw of a timed request: its wall clock and the GPU's state."""

    wall_ms: float
    gpu_state: dict[str, Any] | None = None


class Seat(Protocol):
    """What a flow may do with the device it was given (see the module docstring)."""

    device: str
    gpu_type: str
    key: PoolKey  # the device's workers
    clock: Clock
    step: JobStep
    jit: JitStore | None  # the JIT compilers' caches kept per source

    async def take(self, label: str, needs: Needs = UNKNOWN_SOURCE) -> Worker: ...

    async def call(self, worker: Worker, side: Side, stage: Stage, message: Message,
                   expected: type[R] | tuple[type[Message], ...],
                   fds: list[int] | None = None) -> R: ...

    async def timed(self, worker: Worker, side: Side, stage: Stage, message: Message,
                    expected: type[R] | tuple[type[Message], ...],
                    settle_s: float | None = None) -> tuple[R, Observed]: ...

    async def progress(self, text: str, fraction: float) -> None: ...

    def holding_spares(self) -> contextlib.AbstractAsyncContextManager[None]: ...

    def alone(self) -> contextlib.AbstractAsyncContextManager[None]: ...

    async def last_job_gone(self) -> None: ...

    def let_go(self, worker: Worker) -> None: ...

    # the reference side's (orchestration.references): workers that outlive the job
    async def lend(self, worker: Worker) -> None: ...

    def disown(self, worker: Worker) -> None: ...

    def release(self, worker: Worker, healthy: bool) -> None: ...


class Placement:
    """The slots, gates and workers of this host's devices, shared by all jobs."""

    def __init__(self, settings: Settings, device: str, slots: list[Slot], gpus: list[GPUInfo],
                 extra_env: dict[str, str] | None = None) -> None:
        self.settings = settings
        self.device = device
        self.slots = DevicePool(slots)
        self.workers = WorkerPool(settings, device, extra_env,
                                  {g.id: g.memory_total_mb for g in gpus})
        self.jit = JitStore(settings.jit_cache_dir, settings.jit_cache_bytes,
                            environment_fingerprint(device, (extra_env or {}).get(
                                "TORCH_CUDA_ARCH_LIST")))
        self.gpu_types = {g.id: g.name for g in gpus}
        self.gpu_uuids = {g.id: g.uuid for g in gpus}
        self.gpu_state = GpuState()
        self.gates = GpuGates(drain=device == "cuda")
        # the workers of each job on a device now, for stopping them while another job of
        # that device is timed
        self.on_device: dict[PoolKey, dict[int, list[Worker]]] = {}
        # processes of a device that belong to no job but have run user code (idle judges,
        # which keep a reference loaded between comparisons): stopped by the first timing
        # that meets them and left stopped while they stay idle (the pids stopped, by worker),
        # until :meth:`resume`: one stop per idle stretch, not a stop and a resume per timing
        self.idle_with_user_code: Callable[[PoolKey], list[Worker]] = lambda key: []
        self.kept_stopped: dict[Worker, list[int]] = {}

    def key(self, slot: Slot) -> PoolKey:
        return PoolKey(slot.gpu_id if self.device == "cuda" else None)

    def timing_cores(self, gpu_id: int | None) -> list[int] | None:
        """The core a timed process on GPU ``gpu_id`` is held to while it is timed (the same
        for the reference's process and the candidate's); None in CPU mode, where every job
        process is held to its cores for good."""
        if self.device != "cuda" or gpu_id not in self.gpu_types:
            return None
        ids = sorted(self.gpu_types)
        return [timing_core(ids.index(gpu_id), len(ids), os.sched_getaffinity(0))]

    async def start(self) -> None:
        for slot in self.slots.slots:
            self.workers.replenish(self.key(slot))
        keys = {self.key(slot) for slot in self.slots.slots}
        await asyncio.gather(*(self.workers.zygote(k) for k in keys), return_exceptions=True)
        if self.device == "cuda":  # open NVML now, not inside the first job's timing
            for uuid in self.gpu_uuids.values():
                await asyncio.to_thread(self.gpu_state.handle, uuid)

    async def close(self) -> None:
        await self.workers.close()

    def seat(self, slot: Slot, step: JobStep, clock: Clock, progress: ProgressFn,
             gpu_id: int | None) -> LocalSeat:
        return LocalSeat(self, slot, step, clock, progress, gpu_id)


class LocalSeat:
    """One job's hold on one device slot (see the module docstring)."""

    def __init__(self, placement: Placement, slot: Slot, step: JobStep, clock: Clock,
                 progress: ProgressFn, gpu_id: int | None) -> None:
        self.placement = placement
        self.jit: JitStore | None = placement.jit
        self.slot = slot
        self.step = step
        self.clock = clock
        self._progress = progress
        self.device = placement.device
        self.key = placement.key(slot)
        self.gpu_id = gpu_id
        self.gpu_type = placement.gpu_types.get(gpu_id or 0, "cpu") if self.device == "cuda" \
            else "cpu"
        self.held: list[Worker] = []
        self.borrowed: list[Worker] = []  # held for the job, owned by someone else (a judge)
        # output of borrowed workers while they worked for the job (for the job's log)
        self.outputs: list[tuple[str, OutputCapture]] = []
        self._jobs_here = placement.on_device.setdefault(self.key, {})
        self._jobs_here[id(step)] = self.held

    # ---- the flow's handle

    async def progress(self, text: str, fraction: float) -> None:
        await self._progress(text, fraction)

    async def take(self, label: str, needs: Needs = UNKNOWN_SOURCE) -> Worker:
        try:
            # a worker started for it creates a context: not during another job's timing
            async with self._shared():
                worker = await self.placement.workers.take(self.key, needs)
        except WorkerDied as exc:  # no user code has run yet: the server's fault
            raise RuntimeError(f"could not start a worker: {exc}") from exc
        worker.label = label
        self.held.append(worker)
        self.clock.lap("worker_wait")
        return worker

    async def lend(self, worker: Worker) -> None:
        """``worker`` (a judge kept between jobs) works for this job until :meth:`release`,
        running again if a timing left it stopped."""
        self.held.append(worker)
        self.borrowed.append(worker)
        await self.resume(worker)

    def disown(self, worker: Worker) -> None:
        """``worker``, which the job took, outlives it (a judge, kept by the judges once the
        job is done with it): the job's end leaves it to :meth:`release`."""
        self.borrowed.append(worker)

    def let_go(self, worker: Worker) -> None:
        """The job is done with ``worker``, one it took for itself, before its end: killed now
        and departing (its context's teardown runs beside the job's last steps, and the next
        timing on the device waits for it as for the rest). Its output becomes the job's log
        at the end, with the others'."""
        worker.kill()
        self.placement.workers.depart(self.key, [worker])

    def release(self, worker: Worker, healthy: bool) -> None:
        """The job is done with a worker it does not own (see :meth:`lend`): what it printed
        meanwhile goes to the job's log."""
        self.outputs.append((worker.label, worker.output.take()))
        if worker in self.held:
            self.held.remove(worker)
        if worker in self.borrowed:
            self.borrowed.remove(worker)
        if not healthy:
            worker.kill()
            self.placement.workers.depart(self.key, [worker])
            self.placement.workers.release(worker)

    async def call(self, worker: Worker, side: Side, stage: Stage, message: Message,
                   expected: type[R] | tuple[type[Message], ...],
                   fds: list[int] | None = None) -> R:
        async with self._shared():
            return await self._request(worker, side, stage, message, expected, fds)

    async def timed(self, worker: Worker, side: Side, stage: Stage, message: Message,
                    expected: type[R] | tuple[type[Message], ...],
                    settle_s: float | None = None) -> tuple[R, Observed]:
        if settle_s is None:  # waiting spends the job's time: at most a share of what is left
            left = self.step.time_left() if self.step.deadline is not None else TIMING_SETTLE_S
            settle_s = min(TIMING_SETTLE_S, max(0.0, left * TIMING_SETTLE_SHARE))
        workers = self.placement.workers
        mark = time.perf_counter()
        # the workers still starting are stopped for the timing (see _alone), not awaited;
        # the last job's leaving processes are
        await workers.departed(self.key, settle_s)
        mark = self._spent("settle", mark)
        async with self._alone(timing=True), workers.quiet(self.key, 0.0):
            mark = self._spent("alone", mark)
            sampler = None
            if self.device == "cuda":
                sampler = await asyncio.to_thread(self.placement.gpu_state.sampler,
                                                  self.placement.gpu_uuids.get(self.gpu_id or 0))
            if sampler is not None:
                sampler.start()
            began = self._spent("gpu_state", mark)
            try:
                reply = await self._request(worker, side, stage, message, expected, None)
            finally:
                wall_ms = (time.perf_counter() - began) * 1e3
                mark = time.perf_counter()
                state = await asyncio.to_thread(sampler.stop) if sampler is not None else None
                mark = self._spent("gpu_state", mark)
        self._spent("alone_end", mark)
        return reply, Observed(wall_ms, state)

    def _spent(self, what: str, since: float) -> float:
        """The server's time since ``since`` counted as ``server.<what>``; now."""
        now = time.perf_counter()
        self.step.spent(what, (now - since) * 1e3)
        return now

    def holding_spares(self) -> contextlib.AbstractAsyncContextManager[None]:
        """No spare starts on this device meanwhile (the reference's timing must not wait for
        the replacements of the workers this job just took)."""
        return self.placement.workers.quiet(self.key, 0.0)

    async def last_job_gone(self) -> None:
        """Wait (a little) for the last job's processes on this device to be gone."""
        await self.placement.workers.departed(self.key, DEPARTED_WAIT_S)

    # ---- gates

    async def _request(self, worker: Worker, side: Side, stage: Stage, message: Message,
                       expected: type[R] | tuple[type[Message], ...],
                       fds: list[int] | None) -> R:
        self.step.set(side, stage)
        began = time.perf_counter()
        try:
            reply, extra = await worker.call(message, fds)
        finally:
            self.step.called(side, str(getattr(message, "op", type(message).__name__)),
                             (time.perf_counter() - began) * 1e3)
        for fd in extra:
            _close(fd)
        return interpret(side, message, reply, expected)

    @contextlib.asynccontextmanager
    async def _shared(self) -> AsyncIterator[None]:
        """One untimed request: in while no other job has the device alone (a wait that
        moves the job's deadline); at once when the job itself has it alone."""
        gate = self.placement.gates[self.key]
        if gate.alone is self.step:
            yield
            return
        self.step.gate_wait_began()
        try:
            async with gate.shared(self.step):
                self.step.gate_wait_ended()
                yield
        finally:
            self.step.gate_wait_ended()

    @contextlib.asynccontextmanager
    async def _alone(self, timing: bool = False) -> AsyncIterator[None]:
        """The device to this job alone: the other jobs' requests in flight done, none let in,
        their processes stopped (a thread of theirs launches nothing meanwhile); for a timing
        the workers still starting on the device stopped too."""
        gate = self.placement.gates[self.key]
        if gate.alone is self.step:
            yield
            return
        self.step.gate_wait_began()
        try:
            async with gate.exclusive(self.step):
                self.step.gate_wait_ended()
                others = [w.pid for sid, workers in self._jobs_here.items()
                          if sid != id(self.step) for w in workers
                          if w.pid is not None and w.status is None]
                starting: list[int] = []
                if timing:
                    starting = self.placement.workers.starting_roots(self.key)
                # an idle judge's reference code may have left a thread running: stopped,
                # and kept so until the judge is leased again
                idle = [w for w in self.placement.idle_with_user_code(self.key)
                        if w.pid is not None and w.status is None and w not in self.held
                        and w not in self.placement.kept_stopped]
                stopped: list[int] = []
                if others or starting or idle:
                    stopped, kept, problems = await asyncio.to_thread(_freeze_all, others,
                                                                      starting, idle)
                    self.placement.kept_stopped.update(kept)
                    if problems:
                        log.warning("could not stop other jobs' processes for a timing: %s",
                                    "; ".join(problems[:3]))
                try:
                    yield
                finally:
                    if stopped:
                        await asyncio.to_thread(thaw, stopped)
        finally:
            self.step.gate_wait_ended()

    async def resume(self, worker: Worker) -> None:
        """``worker``, an idle judge this job leases, running again if a timing left it
        stopped (once no other job has the device alone: it stays stopped through one)."""
        if worker not in self.placement.kept_stopped:
            return
        await self.until_no_one_alone()
        thaw(self.placement.kept_stopped.pop(worker, []))  # (no await: before any timing)

    def alone(self) -> contextlib.AbstractAsyncContextManager[None]:
        """The device to this job alone for a stretch (a memory retry, an ncu pass)."""
        return self._alone()

    async def until_no_one_alone(self) -> None:
        """Return when no other job has this device alone; what the caller does next, without
        awaiting, happens before another can."""
        gate = self.placement.gates[self.key]
        if gate.alone is None or gate.alone is self.step:
            return
        async with gate.shared(None):
            pass

    def leave(self) -> list[Worker]:
        """The job is over: its own workers are killed and departing; the slot is free. Returns
        the workers killed (their output becomes the job's log)."""
        self._jobs_here.pop(id(self.step), None)
        own = [w for w in self.held if w not in self.borrowed]
        for worker in own:
            worker.kill()
        self.placement.workers.depart(self.key, own)
        self.held.clear()
        self.placement.slots.release(self.slot)
        return own


def interpret(side: Side, message: Message, reply: Message,
              expected: type[R] | tuple[type[Message], ...]) -> R:
    """A worker's reply to ``message`` as the model the flow expects, or the exception that
    says what it was instead (the one place that reads a reply's kind)."""
    if isinstance(reply, Failure) and not _allows(expected, Failure):
        raise KernelFailed(side, reply)
    if isinstance(reply, InternalError):
        log.error("a %s worker reported an internal error: %s", side.value, reply.message)
        raise WorkerFault(side, reply.message)
    if not isinstance(reply, expected):
        raise ProtocolViolation(side, f"answered {type(reply).__name__} to "
                                      f"{type(message).__name__}")
    return reply  # type: ignore[return-value]


def _allows(expected: type[Message] | tuple[type[Message], ...], kind: type[Message]) -> bool:
    options = expected if isinstance(expected, tuple) else (expected,)
    return any(issubclass(kind, option) for option in options)


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def _freeze_all(others: list[int], starting: list[int], idle: list[Worker]) -> tuple[
        list[int], dict[Worker, list[int]], list[str]]:
    """Stop ``others``' trees, the ``starting`` workers' (no user code in them yet) and each
    idle worker's: (the others' and starting workers' pids, each idle worker's pids, problems
    met)."""
    stopped, problems = freeze(others, harness_roots=starting) if others or starting \
        else ([], [])
    kept: dict[Worker, list[int]] = {}
    for worker in idle:
        assert worker.pid is not None
        pids, more = freeze([worker.pid])
        kept[worker] = pids
        problems += more
    return stopped, kept, problems


def timing_core(position: int, gpus: int, allowed: set[int]) -> int:
    """The core that the process timed on the ``position``-th of ``gpus`` GPUs runs on while
    it is timed: one per GPU, from that GPU's share of ``allowed`` (the second core of the
    share where it has two, leaving the first to whatever else the host runs there)."""
    cores = sorted(allowed)
    share = max(1, len(cores) // max(1, gpus))
    first = (position * share) % len(cores)
    return cores[(first + (1 if share > 1 else 0)) % len(cores)]
