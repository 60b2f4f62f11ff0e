"""The executor on Ray: jobs run on the GPUs of a Ray cluster, one job per GPU at a time.

Each GPU of the cluster (in CPU mode each unit of the ``kes_slot`` resource, since the nodes
have no GPU) is a *slot*: a Ray actor (:class:`~orchestration.ray_node.NodeRunner`) holding
it (``num_gpus=1``) that runs jobs on its node with a
:class:`~orchestration.executor.LocalExecutor` of one slot: the same worker pipeline, sandbox
and timing as on the server's own host. The server keeps the job store; it hands jobs to idle
slots in arrival order, relays their progress (polled from the slot), and writes each job's
worker log into the job's directory here.

A slot lost mid-job (its actor's process killed, its node gone: Ray raises an actor error,
or the slot stops answering past the job's deadline) costs the job one more run, first in
line for the next free slot; lost a second time, the job ends ``failed`` with the reason. It
is never left ``running``. Ray restarts a lost actor (on the same node, or on another with a
free GPU), and the slot takes jobs again once its actor answers.

``/health`` and ``/stats`` show the cluster (:meth:`RayExecutor.cluster`). Ray is imported
only here and on the nodes, when ``EXECUTOR=ray`` (:func:`connect`).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
import uuid
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from orchestration import verdicts
from orchestration.device_probe import DeviceError, DeviceInfo
from orchestration.executor import ExecutorStatus, ProgressFn
from orchestration.ray_node import NodeReply, NodeRunner, SlotInfo
from orchestration.worker_pool import PROJECT_ROOT
from shared.job_files import write_atomic
from shared.models import (
    MAX_TIMEOUT_S,
    ClusterInfo,
    ClusterNode,
    ClusterSlot,
    WorkerJob,
    WorkerResult,
)
from shared.settings import Settings

log = logging.getLogger("kernel_eval.ray")

# The custom resource a node offers per job slot when it has no GPU (CPU mode):
# ray start ... --resources='{"kes_slot": 2}'.
SLOT_RESOURCE = "kes_slot"
RETRIES = 1  # runs of a job after its slot was lost
START_TIMEOUT_S = 300.0  # for the slots to start (the first imports torch and probes its GPU)
PROGRESS_POLL_S = 0.5
CALL_TIMEOUT_S = 10.0  # progress, logs, close: small calls
REJOIN_TIMEOUT_S = 300.0
REJOIN_RETRY_S = 2.0
NODES_REFRESH_S = 2.0
ISOLATION_RANK = {"none": 0, "namespaces": 1, "namespaces+uid": 2}
SlotState = Literal["starting", "idle", "busy", "lost"]


class ClusterError(RuntimeError):
    """The Ray cluster cannot be reached or offers no slot for jobs."""


class SlotLost(Exception):
    """A slot's actor or its node went away during a call (or stopped answering)."""


class SlotRunner(Protocol):
    """A slot's actor as the executor calls it: :class:`ActorRunner` on Ray, fakes in tests.

    Every method raises :class:`SlotLost` when the actor or its node is gone.
    """

    async def ready(self) -> SlotInfo: ...

    async def run(self, job: WorkerJob, timeout: float) -> NodeReply: ...

    async def progress(self, job_id: str) -> tuple[str, float] | None: ...

    async def take_log(self, job_id: str) -> str | None: ...

    async def close(self) -> None: ...


@dataclass(eq=False)
class RaySlot:
    """One slot as the server tracks it."""

    index: int
    runner: SlotRunner
    state: SlotState = "starting"
    info: SlotInfo | None = None
    job_id: str | None = None
    busy_since: float | None = None
    busy_total: float = 0.0
    counted: dict[str, dict[str, int]] = field(default_factory=dict)  # info.cache already summed

    @property
    def gpu_id(self) -> int | None:
        return self.info.gpu.id if self.info is not None and self.info.gpu is not None else None

    @property
    def label(self) -> str:
        """The slot's name in metrics: unique across nodes."""
        where = self.info.address if self.info is not None else "?"
        return f"{where}/{'cpu' if self.gpu_id is None else 'gpu'}{self.index}"

    def where(self) -> str:
        if self.info is None:
            return f"slot {self.index}"
        device = f"GPU {self.gpu_id}" if self.gpu_id is not None else f"slot {self.index}"
        return f"node {self.info.address} ({self.info.node_id[:8]}), {device}"


class SlotPool:
    """Idle slots, handed to jobs in arrival order (a job run again goes first).

    A lost slot is out of the pool until its actor answers again (:meth:`add`).
    """

    def __init__(self, slots: list[RaySlot]) -> None:
        self.slots = slots
        self._idle: deque[RaySlot] = deque()
        self._waiters: deque[asyncio.Future[RaySlot]] = deque()
        self._created = time.monotonic()

    def add(self, slot: RaySlot) -> None:
        """``slot`` is free: to the first waiting job, or idle."""
        slot.state, slot.job_id = "idle", None
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(slot)
                return
        self._idle.append(slot)

    async def acquire(self, job_id: str, first: bool = False) -> RaySlot:
        if self._idle:  # then nobody waits: add() serves waiters first
            slot = self._idle.popleft()
        else:
            waiter: asyncio.Future[RaySlot] = asyncio.get_running_loop().create_future()
            (self._waiters.appendleft if first else self._waiters.append)(waiter)
            try:
                slot = await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self.add(waiter.result())  # handed over just as the job gave up
                raise
        slot.state, slot.job_id, slot.busy_since = "busy", job_id, time.monotonic()
        return slot

    def release(self, slot: RaySlot) -> None:
        self._stop_clock(slot)
        self.add(slot)

    def lose(self, slot: RaySlot) -> None:
        self._stop_clock(slot)
        slot.state, slot.job_id = "lost", None

    def waiting(self) -> int:
        """Jobs waiting for a slot now."""
        return sum(1 for w in self._waiters if not w.done())

    def busy_shares(self) -> dict[RaySlot, float]:
        """Each slot's share (0-1) of the time since the pool began spent running jobs."""
        now = time.monotonic()
        elapsed = max(now - self._created, 1e-9)
        return {s: min(1.0, self._busy(s, now) / elapsed) for s in self.slots}

    def utilization_pct(self) -> float:
        now = time.monotonic()
        capacity = (now - self._created) * len(self.slots)
        busy = sum(self._busy(s, now) for s in self.slots)
        return 100.0 * busy / capacity if capacity > 0 else 0.0

    def _stop_clock(self, slot: RaySlot) -> None:
        if slot.busy_since is not None:
            slot.busy_total += time.monotonic() - slot.busy_since
            slot.busy_since = None

    @staticmethod
    def _busy(slot: RaySlot, now: float) -> float:
        return slot.busy_total + (now - slot.busy_since if slot.busy_since is not None else 0.0)


class ClusterWorkers:
    """The cluster's workers as /health and /stats read a local pool's: the weakest isolation
    in force on any slot, and the ready workers of all slots."""

    def __init__(self, pool: SlotPool) -> None:
        self.pool = pool

    def _weakest(self) -> SlotInfo | None:
        infos = [s.info for s in self.pool.slots if s.info is not None and s.state != "lost"]
        return min(infos, key=lambda i: ISOLATION_RANK.get(i.isolation, 0), default=None)

    @property
    def isolation(self) -> str:
        weakest = self._weakest()
        return weakest.isolation if weakest is not None else "none"

    @property
    def isolation_detail(self) -> str:
        weakest = self._weakest()
        if weakest is None:
            return "no slot of the cluster has started"
        return f"the weakest slot, on node {weakest.address}: {weakest.isolation_detail}"

    def ready_count(self) -> int:
        return sum(s.info.ready_workers for s in self.pool.slots
                   if s.info is not None and s.state != "lost")

    def starting_count(self) -> int:
        return 0


class RayExecutor:
    """Runs each job on one slot of the cluster (see the module's docstring)."""

    def __init__(self, settings: Settings, device: str, resource: str, address: str,
                 runners: list[SlotRunner],
                 nodes: Callable[[], list[dict[str, Any]]] = list,
                 shutdown: Callable[[], None] = lambda: None) -> None:
        self.settings = settings
        self.device = device
        self.resource = resource
        self.address = address
        self.slots = SlotPool([RaySlot(i, runner) for i, runner in enumerate(runners)])
        self.workers = ClusterWorkers(self.slots)
        # every slot's cache counters, summed (a restarted slot process counts anew)
        self.cache: dict[str, dict[str, int]] = {}
        self._list_nodes = nodes
        self._nodes: list[dict[str, Any]] = []
        self._shutdown = shutdown
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    # ---- life cycle

    async def open(self) -> None:
        """Wait for the slots' actors to start; those still starting join when they do."""
        joins = [asyncio.ensure_future(self._join(slot)) for slot in self.slots.slots]
        done, pending = await asyncio.wait(joins, timeout=START_TIMEOUT_S)
        started = [t for t in done if t.exception() is None]
        if not started:
            for task in pending:
                task.cancel()
            errors = [str(t.exception()) for t in done]
            raise ClusterError(
                f"no slot of the Ray cluster at {self.address} started within "
                f"{START_TIMEOUT_S:.0f} s" + (f": {errors[0]}" if errors else
                                              " (are its GPUs held by another server?)"))
        for task in done - set(started):
            log.error("a slot did not start: %s", task.exception())
        for task in pending:
            log.warning("a slot is still starting; it takes jobs once it has")
            self._track(task)
        self._nodes = await asyncio.to_thread(self._list_nodes)

    async def start(self) -> None:
        self._track(asyncio.ensure_future(self._refresh_nodes()))

    async def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(_bounded(s.runner.close(), CALL_TIMEOUT_S)
                               for s in self.slots.slots if s.state != "lost"),
                             return_exceptions=True)
        self._shutdown()

    def status(self) -> ExecutorStatus:
        return ExecutorStatus(
            queue_length=self.slots.waiting(), isolation=self.workers.isolation,
            isolation_detail=self.workers.isolation_detail, worker_slots=len(self.slots.slots),
            utilization_pct=round(self.slots.utilization_pct(), 2),
            busy_shares={slot.label: share for slot, share in self.slots.busy_shares().items()},
            workers_starting=self.workers.starting_count(),
            workers_ready=self.workers.ready_count(),
            cache={name: dict(counts) for name, counts in self.cache.items()},
            cluster=self.cluster())

    def device_info(self) -> DeviceInfo:
        """What /health says of the devices: the GPUs of the started slots."""
        gpus = [s.info.gpu for s in self.slots.slots if s.info is not None and s.info.gpu]
        return DeviceInfo(device=self.device, gpus=gpus)

    def cluster(self) -> ClusterInfo:
        """The cluster as /health and /stats show it: nodes, their slots, which are busy."""
        slots = [ClusterSlot(
            index=s.index, state=s.state,
            node_id=s.info.node_id if s.info else None, address=s.info.address if s.info else None,
            gpu_id=s.gpu_id, pid=s.info.pid if s.info else None, job_id=s.job_id,
            isolation=s.info.isolation if s.info else "none",
        ) for s in self.slots.slots]
        nodes = []
        for node in self._nodes:
            mine = [s for s in slots if s.node_id == node.get("NodeID")]
            nodes.append(ClusterNode(
                node_id=str(node.get("NodeID")), address=str(node.get("NodeManagerAddress")),
                alive=bool(node.get("Alive")),
                gpus=int((node.get("Resources") or {}).get(self.resource, 0)),
                slots=len(mine), busy=sum(1 for s in mine if s.state == "busy"),
            ))
        return ClusterInfo(
            address=self.address, resource=self.resource,  # type: ignore[arg-type]
            nodes=nodes, slots=slots, busy=sum(1 for s in slots if s.state == "busy"),
            lost=sum(1 for s in slots if s.state == "lost"),
        )

    # ---- one job

    async def run(self, job: WorkerJob, timeout: float, progress: ProgressFn) -> WorkerResult:
        began = time.perf_counter()
        await progress("waiting for a GPU" if self.device == "cuda" else "queued", 0.05)
        losses: list[str] = []
        waited = 0.0
        while True:
            asked = time.perf_counter()
            try:
                slot = await self._slot_for(job, again=bool(losses))
            except asyncio.TimeoutError:
                return _lost(losses, f"no other slot became free within {self._retry_wait_s:.0f} s")
            waited += time.perf_counter() - asked
            try:
                reply = await self._run_on(slot, job, timeout, progress)
            except SlotLost as exc:
                where = slot.where()
                self.slots.lose(slot)
                self._track(asyncio.ensure_future(self._rejoin(slot)))
                losses.append(f"{where}: {exc}")
                log.warning("job %s: the slot on %s was lost (%s)", job.job_id, where, exc)
                if len(losses) > RETRIES:
                    return _lost(losses)
                await progress(f"the Ray worker on {where} was lost; running the job again", 0.1)
                continue
            except BaseException:
                self.slots.release(slot)  # the slot's call was cancelled with this job
                raise
            self.slots.release(slot)
            return self._finished(job, slot, reply, began, waited, attempts=len(losses) + 1)

    @property
    def _retry_wait_s(self) -> float:
        # A busy slot is free by then: no job runs longer than its timeout (at most this).
        return MAX_TIMEOUT_S + self.settings.worker_grace_s

    async def _slot_for(self, job: WorkerJob, again: bool) -> RaySlot:
        if not again:
            return await self.slots.acquire(job.job_id)
        return await asyncio.wait_for(self.slots.acquire(job.job_id, first=True),
                                      self._retry_wait_s)

    async def _run_on(self, slot: RaySlot, job: WorkerJob, timeout: float,
                      progress: ProgressFn) -> NodeReply:
        job.gpu_id = slot.gpu_id
        await progress(f"running on {slot.where()}", 0.1)
        call = asyncio.ensure_future(slot.runner.run(job, timeout))
        # The node enforces the job's timeout itself; past this, the node is not answering.
        # (A torch_cuda build, then the job, then a device-metrics pass of each side.)
        limit = 4 * timeout + self.settings.worker_grace_s
        deadline = time.monotonic() + limit
        relayed = (f"running on {slot.where()}", 0.1)
        try:
            while True:
                done, _ = await asyncio.wait({call}, timeout=PROGRESS_POLL_S)
                if done:
                    return call.result()
                if time.monotonic() > deadline:
                    raise SlotLost(f"no answer within {limit:.0f} s")
                with suppress(SlotLost, asyncio.TimeoutError):
                    seen = await asyncio.wait_for(slot.runner.progress(job.job_id), CALL_TIMEOUT_S)
                    if seen is not None and seen[1] >= relayed[1] and seen != relayed:
                        relayed = seen
                        await progress(*seen)
        finally:
            if not call.done():
                call.cancel()

    def _finished(self, job: WorkerJob, slot: RaySlot, reply: NodeReply, began: float,
                  waited: float, attempts: int) -> WorkerResult:
        self._count(slot, reply.info)
        slot.info = reply.info
        result = reply.result
        timings = result.stage_timings
        timings["queue_wait"] = round(timings.get("queue_wait", 0.0) + waited * 1e3, 3)
        timings["total"] = round((time.perf_counter() - began) * 1e3, 3)
        verdicts.placed_on(result, reply.info.node_id, reply.info.address, attempts)
        self._track(asyncio.ensure_future(self._fetch_log(slot, job)))
        return result

    def _count(self, slot: RaySlot, info: SlotInfo) -> None:
        """Add what the slot's caches did since its last report (a new process counts anew)."""
        same = slot.info is not None and slot.info.pid == info.pid
        before = slot.counted if same else {}

        for name, counts in info.cache.items():  # (every figure a cache reports is a count)
            total = self.cache.setdefault(name, {})
            for key, value in counts.items():
                total[key] = total.get(key, 0) + value - before.get(name, {}).get(key, 0)
        slot.counted = {name: dict(values) for name, values in info.cache.items()}

    async def _fetch_log(self, slot: RaySlot, job: WorkerJob) -> None:
        """The job's worker log, from its node into the job's directory here."""
        try:
            text = await _bounded(slot.runner.take_log(job.job_id), CALL_TIMEOUT_S + 30)
        except (SlotLost, asyncio.TimeoutError) as exc:
            log.info("job %s: its worker log could not be fetched from its node (%s)",
                     job.job_id, exc)
            return
        if text and job.work_dir:
            await asyncio.to_thread(write_atomic, Path(job.work_dir) / "worker.log", text)

    # ---- the cluster

    async def _join(self, slot: RaySlot) -> None:
        info = await slot.runner.ready()
        self._count(slot, info)
        slot.info = info
        if not self._closed:
            self.slots.add(slot)

    async def _rejoin(self, slot: RaySlot) -> None:
        """Take a lost slot back once its actor (restarted by Ray) answers."""
        while not self._closed:
            try:
                await _bounded(self._join(slot), REJOIN_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - a node's fault: try again, say so
                log.info("slot %d still lost: %s", slot.index, exc)
                await asyncio.sleep(REJOIN_RETRY_S)
                continue
            log.info("slot %d is back, on %s", slot.index, slot.where())
            return

    async def _refresh_nodes(self) -> None:
        while not self._closed:
            try:
                self._nodes = await asyncio.to_thread(self._list_nodes)
            except Exception as exc:  # noqa: BLE001 - /health keeps the last list it had
                log.warning("could not list the Ray cluster's nodes: %s", exc)
            await asyncio.sleep(NODES_REFRESH_S)

    def _track(self, task: asyncio.Future[Any]) -> None:
        self._tasks.add(task)  # type: ignore[arg-type]
        task.add_done_callback(self._tasks.discard)  # type: ignore[arg-type]


def _lost(losses: list[str], extra: str | None = None) -> WorkerResult:
    times = "once" if len(losses) == 1 else "twice" if len(losses) == 2 else f"{len(losses)} times"
    error = (f"the Ray node or worker running this job was lost {times} ({'; then '.join(losses)})"
             + (f"; {extra}" if extra else "") + "; the job was not run to its end")
    return verdicts.server_fault(error)


async def _bounded(awaitable: Any, timeout: float) -> Any:
    return await asyncio.wait_for(awaitable, timeout)


# ---- Ray itself


class ActorRunner:
    """A :class:`NodeRunner` actor, its calls awaited; Ray's errors become :class:`SlotLost`.

    That includes an error raised by the actor's own code (its node cannot start workers, say):
    the job goes to another slot, and this one waits out of the pool until it answers again.
    """

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    async def ready(self) -> SlotInfo:
        return await self._call(self.actor.ready.remote())  # type: ignore[no-any-return]

    async def run(self, job: WorkerJob, timeout: float) -> NodeReply:
        return await self._call(self.actor.run.remote(job, timeout))  # type: ignore[no-any-return]

    async def progress(self, job_id: str) -> tuple[str, float] | None:
        return await self._call(self.actor.progress.remote(job_id))  # type: ignore[no-any-return]

    async def take_log(self, job_id: str) -> str | None:
        return await self._call(self.actor.take_log.remote(job_id))  # type: ignore[no-any-return]

    async def close(self) -> None:
        await self._call(self.actor.close.remote())

    async def _call(self, ref: Any) -> Any:
        import ray

        try:
            return await ref
        except asyncio.CancelledError:
            with suppress(Exception):
                ray.cancel(ref)  # the node stops the job (its workers are killed)
            raise
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
                ray.exceptions.NodeDiedError, ray.exceptions.ObjectLostError) as exc:
            raise SlotLost(_first_line(exc)) from exc
        except ray.exceptions.RayError as exc:
            raise SlotLost(f"the node failed: {_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ClusterError("EXECUTOR=ray needs Ray on the server and on every node: "
                           "pip install 'kernel-eval-server[ray]' (or 'ray>=2.40')") from exc
    return ray


async def connect(settings: Settings) -> RayExecutor:
    """Join the Ray cluster at ``RAY_ADDRESS``, start a slot on each of its GPUs (up to
    ``MAX_WORKERS``; in CPU mode on each ``kes_slot``) and wait for them to be ready."""
    ray = _import_ray()
    address = settings.ray_address or "auto"
    # ray.init replaces the server's SIGTERM handler by one that exits at once: keep ours,
    # so that a stopping server still lets its jobs finish (JobManager.close).
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        # The nodes import this project from the same path as the server (docs/SCALE_OUT.md).
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False,
                 configure_logging=False,
                 runtime_env={"env_vars": {"PYTHONPATH": str(PROJECT_ROOT)}})
    except Exception as exc:
        raise ClusterError(f"cannot join the Ray cluster at {address}: {exc}") from exc
    finally:
        for sig, handler in handlers.items():
            if handler is not None:
                signal.signal(sig, handler)
    try:
        resources = ray.cluster_resources()
        gpus, cpu_slots = int(resources.get("GPU", 0)), int(resources.get(SLOT_RESOURCE, 0))
        if settings.device == "cpu" or (settings.device == "auto" and gpus == 0):
            device, resource, total = "cpu", SLOT_RESOURCE, cpu_slots
            per_slot: dict[str, Any] = {"resources": {SLOT_RESOURCE: 1}}
        else:
            device, resource, total = "cuda", "GPU", gpus
            per_slot = {"num_gpus": 1}
        if total == 0:
            raise DeviceError(
                f"the Ray cluster at {address} has no {'GPU' if device == 'cuda' else SLOT_RESOURCE}"
                f" resource: start its nodes with --num-gpus, or in CPU mode with "
                f"--resources='{{\"{SLOT_RESOURCE}\": N}}'")
        actor = ray.remote(NodeRunner).options(
            num_cpus=0, max_restarts=-1, max_task_retries=0, scheduling_strategy="SPREAD",
            **per_slot)
        run_id = uuid.uuid4().hex[:8]
        shipped = replace(settings, api_key=None)
        handles = [actor.remote(shipped, device, f"{run_id}-{i}")
                   for i in range(settings.slots(total))]
    except BaseException:
        ray.shutdown()
        raise

    def shutdown() -> None:
        for handle in handles:
            with suppress(Exception):
                ray.kill(handle, no_restart=True)
        ray.shutdown()

    executor = RayExecutor(settings, device, resource, address,
                           [ActorRunner(h) for h in handles], nodes=ray.nodes, shutdown=shutdown)
    try:
        await executor.open()
    except BaseException:
        shutdown()
        raise
    log.info("Ray cluster at %s: %d slot(s) on %s", address, len(handles), resource)
    return executor
