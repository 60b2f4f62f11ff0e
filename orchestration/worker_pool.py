"""Ready workers: one zygote per GPU forks sandboxed job processes ahead of demand.

Importing torch takes seconds and creating a CUDA context a few hundred milliseconds; a job
should wait for neither. So each GPU has a zygote (:mod:`worker_host.zygote`) that has
imported the stack once, and the pool keeps ``spares`` job processes forked from it, each
already sandboxed, with its own CUDA context, waiting for one job. A job takes ready workers
(two for a comparison: the reference/checker and the custom kernel) and the pool forks
replacements at once; a fork costs tens of milliseconds and the context a few hundred, so
the pool keeps up with jobs arriving faster than that only as far as its spares reach.

Seen from the server a worker is a :class:`~orchestration.worker.Worker`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from orchestration.worker import BlockingCalls, Worker, WorkerDied
from orchestration.worker_kinds import (
    CUDA_DEFAULT_QUEUES,
    ONE_QUEUE,
    QUEUES_ENV,
    UNKNOWN_SOURCE,
    Needs,
    Warm,
    best_ready,
)
from orchestration.zygotes import PROJECT_ROOT, PoolKey, Zygote, Zygotes
from shared.protocol import (
    JIT_DIR_ENV,
    PRIVATE_TMP_ROOT,
    WARM_BASE,
    WARM_CUBLAS,
    WORK_DIR_ENV,
    Spawn,
)
from shared.settings import Settings

log = logging.getLogger("kernel_eval.workers")

WORKER_SCRIPT = PROJECT_ROOT / "subprocess_worker.py"
WORKER_READY_TIMEOUT_S = 120
# What an idle ready worker holds on its GPU (CUDA context, cuBLAS workspace, the timer's
# flush buffer), rounded up: 27 spares and a zygote held 29.7 GB on an H100 (bench/soak.py).
SPARE_GPU_MB = 1024
# The share of a GPU's memory the automatic spare count may hold; the rest is the jobs'.
SPARE_MEMORY_SHARE = 0.35
DEFAULT_CPU_SPARES = 6
DEPART_TIMEOUT_S = 10.0  # a job's killed worker is reaped within this, or killed again
AUTO_SPARES_MIN, AUTO_SPARES_MAX = 6, 32

# The GPU's device nodes (NVIDIA's driver: nvidia0..N, nvidiactl, nvidia-uvm, nvidia-modeset,
# and the MIG capability nodes under nvidia-caps), which the build stage does not get.
GPU_DEVICE_GLOB = "nvidia*"
GPU_DEVICE_DIRS = ("/dev/nvidia-caps",)


def gpu_device_nodes(dev: Path = Path("/dev")) -> list[str]:
    """The GPU device nodes present on this host (files only; none on a CPU host)."""
    return sorted(str(p) for p in dev.glob(GPU_DEVICE_GLOB) if not p.is_dir())


def refill_batch(spares: int) -> int:
    """How many spares must be missing before the pool starts them all at once: a third.
    Each start holds up the GPU's timings and the driver makes contexts faster side by side;
    a larger batch lets a burst of jobs run dry of spares (docs/WORKER_DESIGN.md)."""
    return max(1, spares // 3)


def auto_spares(memory_total_mb: int | None, share: float = SPARE_MEMORY_SHARE) -> int:
    """Ready workers for a GPU when SPARES_PER_GPU is ``auto``: as many as fit in ``share``
    of its memory, between AUTO_SPARES_MIN and AUTO_SPARES_MAX.

    Spares are the only thing that lets jobs arrive faster than the driver makes CUDA contexts
    (docs/WORKER_DESIGN.md); their cost is GPU memory the jobs cannot use.
    """
    if not memory_total_mb:
        return AUTO_SPARES_MIN
    fits = int(memory_total_mb * share // SPARE_GPU_MB)
    return max(AUTO_SPARES_MIN, min(AUTO_SPARES_MAX, fits))


class WorkerPool:
    def __init__(self, settings: Settings, device: str, extra_env: dict[str, str] | None = None,
                 gpu_memory_mb: dict[int, int | None] | None = None) -> None:
        self.settings = settings
        self.device = device
        self.extra_env = dict(extra_env or {})
        self.gpu_memory_mb = dict(gpu_memory_mb or {})
        self._ready: dict[PoolKey, deque[Worker]] = {}
        self._starting: dict[PoolKey, int] = {}  # spares on their way
        self._made_for_jobs: dict[PoolKey, int] = {}  # workers on their way for one job each
        # the outer processes of the workers being started, by device (a timing stops them)
        self._starting_roots: dict[PoolKey, set[int]] = {}
        self._waiting: dict[PoolKey, deque[asyncio.Future[Worker]]] = {}
        self._wants: dict[asyncio.Future[Worker], Warm | None] = {}  # what each waiter needs
        self._quiet: dict[PoolKey, int] = {}
        self._departing: dict[PoolKey, set[Worker]] = {}
        self._departures: dict[PoolKey, asyncio.Event] = {}  # set when one of them is gone
        # what the spares taken had to warm: the refill starts as many of each kind
        self._owed: dict[PoolKey, deque[Warm]] = {}
        self._fills: dict[PoolKey, int] = {}  # spares started with nothing owed (the first)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        self.work_root = settings.job_dir / "work"
        self.blocking = BlockingCalls()
        self.zygotes = Zygotes(settings, device, self.extra_env, self.work_root, self.blocking,
                               lambda key: self.warm(key, UNKNOWN_SOURCE))
        self.spawned = 0

    # ---- zygotes

    def zygote_env(self, key: PoolKey) -> dict[str, str]:
        return self.zygotes.env(key)

    def hidden_paths(self) -> list[Path]:
        return self.zygotes.hidden_paths()

    async def zygote(self, key: PoolKey) -> Zygote:
        return await self.zygotes.get(key)

    @property
    def isolation(self) -> str:
        return self.zygotes.isolation

    @property
    def isolation_detail(self) -> str:
        return self.zygotes.isolation_detail

    # ---- workers

    def queues(self, key: PoolKey, streams: bool = False) -> str | None:
        """The hardware work queues of ``key``'s workers (None: no CUDA there); with
        ``streams``, of a worker made for a source that may use several streams."""
        if key.build or key.gpu_id is None or self.device != "cuda":
            return None
        chosen = self.extra_env.get(QUEUES_ENV, os.environ.get(QUEUES_ENV))
        if chosen is not None:
            return chosen
        return CUDA_DEFAULT_QUEUES if streams else ONE_QUEUE

    def warm(self, key: PoolKey, needs: Needs) -> Warm | None:
        """What a worker for ``key`` does before a job that ``needs`` it (None: no CUDA
        there): cuBLAS too where the job's source may call it (:func:`uses_cublas`), the
        base libraries otherwise; it rehearses a comparison unless the job runs its kernel
        alone."""
        if self.queues(key) is None:
            return None
        return Warm(WARM_CUBLAS if needs.cublas else WARM_BASE, needs.alone)

    async def spawn(self, key: PoolKey, queues: str | None = None,
                    warm: Warm | None = None) -> Worker:
        """A new worker for ``key``; ``queues``: its context's hardware work queues, where
        they differ from the zygote's; ``warm``: what it warms, where that differs."""
        zygote = await self.zygote(key)
        scratch = self.work_root / f"w-{uuid.uuid4().hex[:12]}"
        scratch.mkdir(parents=True)
        writable = [str(self.settings.build_cache_dir.resolve())] if key.build else []
        self.settings.build_cache_dir.mkdir(parents=True, exist_ok=True)
        # every JIT compiler's cache in one directory (the kernel languages' too: CuTe DSL,
        # TileLang, Helion through Triton's and Inductor's), which the server's JIT store
        # restores for a later job of the same source (jit_store.py): at a fixed path in the
        # worker's own /tmp where it has one, so that paths recorded there still hold
        root = Path(PRIVATE_TMP_ROOT) if zygote.isolation != "none" else scratch
        jit = root / ".jit"
        env = {"HOME": str(scratch), "TMPDIR": "/tmp",
               "XDG_CACHE_HOME": str(scratch / ".cache"),
               JIT_DIR_ENV: str(jit), WORK_DIR_ENV: str(root / "work"),
               "TRITON_CACHE_DIR": str(jit / "triton"),
               "CUPY_CACHE_DIR": str(jit / "cupy"),
               "TORCH_EXTENSIONS_DIR": str(scratch / "torch_extensions"),
               "TORCHINDUCTOR_CACHE_DIR": str(jit / "inductor"),
               "CUTE_DSL_CACHE_DIR": str(jit / "cute_dsl"),
               "TILELANG_CACHE_DIR": str(jit / "tilelang"),
               "HELION_CACHE_DIR": str(jit / "helion"),
               # a Helion kernel without a config of its own runs Helion's default one: its
               # autotuner (minutes of benchmarking) has no place inside a job
               "HELION_AUTOTUNE_EFFORT": "none"}
        if queues is not None:
            env[QUEUES_ENV] = queues
        if warm is not None:
            env.update(warm.env())
        readable = [] if key.build else [str(self.settings.build_cache_dir.resolve())]
        # the build stage runs a source's module code with no GPU of its own and beside other
        # jobs' timings: it gets none (its nodes read as /dev/null, its CUDA finds no device),
        # and the lowest CPU priority (sandbox.in_the_background)
        masked = gpu_device_nodes() if key.build else []
        hidden = [str(p) for p in self.hidden_paths()]
        if key.build:
            hidden += [d for d in GPU_DEVICE_DIRS if os.path.isdir(d)]
        began = time.perf_counter()
        ctrl, chan, out_fd, outer = await zygote.spawn(Spawn(
            scratch=str(scratch), hidden=hidden, masked=masked, background=key.build,
            writable=writable, readable=readable, uid=self.settings.sandbox_uid,
            network=self.settings.worker_network, env=env,
            scratch_mb=self.settings.worker_scratch_mb, requested_at=time.monotonic()))
        worker = Worker(ctrl, chan, out_fd, scratch, self.blocking)
        worker.contained = zygote.isolation != "none"
        worker.queues = queues or self.queues(key)
        worker.warmed = warm or self.warm(key, UNKNOWN_SOURCE)
        starting = self._starting_roots.setdefault(key, set())
        starting.add(outer)
        try:
            await asyncio.wait_for(worker.start(), WORKER_READY_TIMEOUT_S)
        except BaseException:
            worker.kill()
            await worker.close(grace=2)
            log.warning("a %s worker failed to start; its output:\n%s", key.name,
                        worker.output.tail(4000) or "(none)")
            raise
        finally:
            starting.discard(outer)
        self.spawned += 1
        log.log(logging.INFO if self.spawned <= 8 else logging.DEBUG,
                "%s worker ready in %.0f ms (%s)", key.name, (time.perf_counter() - began) * 1e3,
                ", ".join(f"{k} {v}" for k, v in worker.startup.items()))
        return worker

    async def take(self, key: PoolKey, needs: Needs = UNKNOWN_SOURCE) -> Worker:
        """A ready worker for ``key``; replaced at once by a new spare.

        With none ready, the job waits for the first worker that becomes ready for ``key``
        (in arrival order): one already starting is usually closer than a fresh fork. With
        ``needs.streams`` (the job's code may use several streams) where the spares have one
        work queue, a worker made for the job with CUDA's default. A spare that warmed what
        ``needs.cublas`` asks is taken first; a job that runs its
        kernel alone (``needs.alone``) takes one that rehearsed only that (:class:`Warm`),
        else the lightest that covers what it needs, else any; the refill starts one of its
        kind.
        """
        queues = self.queues(key, needs.streams)
        warm = self.warm(key, needs)
        if queues != self.queues(key):
            return await self._made_for_the_job(key, queues, warm)
        if not self.settings.spare_workers:
            return await self.spawn(key, warm=warm)
        ready = self._ready.setdefault(key, deque())
        for gone in [w for w in ready if w.status is not None or w._gone.is_set()]:
            ready.remove(gone)
            self._background(gone.close(grace=1))
        if warm is not None:
            self._owed.setdefault(key, deque(maxlen=AUTO_SPARES_MAX)).append(warm)
        if ready:
            chosen = best_ready(ready, warm)
            ready.remove(chosen)
            self.replenish(key)
            return chosen
        waiter: asyncio.Future[Worker] = asyncio.get_running_loop().create_future()
        waiting = self._waiting.setdefault(key, deque())
        waiting.append(waiter)
        self._wants[waiter] = warm
        self.replenish(key)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                ready.appendleft(waiter.result())  # handed over as the job gave up: keep it
            raise
        finally:
            self._wants.pop(waiter, None)
            if waiter in waiting:
                waiting.remove(waiter)

    async def _made_for_the_job(self, key: PoolKey, queues: str | None,
                                warm: Warm | None) -> Worker:
        """A worker started for one job (counted as starting meanwhile: a timing on the device
        stops it or waits for it, as it does a spare; it is no spare to refill)."""
        self._made_for_jobs[key] = self._made_for_jobs.get(key, 0) + 1
        try:
            return await self.spawn(key, queues, warm)
        finally:
            self._made_for_jobs[key] -= 1

    def shed(self, key: PoolKey) -> int:
        """Stop ``key``'s ready spares (how many): their contexts' GPU memory is the job's
        for a while (call inside :meth:`quiet`, whose end starts them again)."""
        ready = list(self._ready.pop(key, deque()))
        self.dismiss(key, ready)
        return len(ready)

    def dismiss(self, key: PoolKey, workers: list[Worker]) -> None:
        """Kill ``workers`` now: departing until they are gone (see :meth:`departed`), then
        cleaned up after."""
        for worker in workers:
            worker.kill()
        self.depart(key, workers)
        for worker in workers:
            self.release(worker)

    def depart(self, key: PoolKey, workers: list[Worker]) -> None:
        """``workers`` (of a job that is over, killed) are on their way out: until they are
        gone, their CUDA contexts are being torn down and whatever they left running on the
        GPU still runs (see :meth:`departed`)."""
        leaving = self._departing.setdefault(key, set())
        for worker in workers:
            if worker.status is None:
                leaving.add(worker)
                self._background(self._gone(key, worker))

    async def _gone(self, key: PoolKey, worker: Worker) -> None:
        try:
            await worker.exit_status(DEPART_TIMEOUT_S)
        finally:
            self._departing.get(key, set()).discard(worker)
            self._departures.pop(key, asyncio.Event()).set()
            if worker.killed_at is not None and log.isEnabledFor(logging.DEBUG):
                # what the next timing on the device waits for (bench/job_overhead.py reads it)
                log.debug("%s worker gone %.1f ms after its kill (%d starting, %d ready)",
                          key.name, (time.monotonic() - worker.killed_at) * 1e3,
                          len(self._starting_roots.get(key, ())),
                          len(self._ready.get(key, ())))

    async def departed(self, key: PoolKey, wait_s: float) -> None:
        """Wait (at most ``wait_s``) until the workers of ``key``'s earlier jobs are gone: woken
        as each goes (the next timing starts the moment the last one is gone)."""
        deadline = time.monotonic() + wait_s
        while self._departing.get(key) and (left := deadline - time.monotonic()) > 0:
            one_gone = self._departures.setdefault(key, asyncio.Event())
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(one_gone.wait(), left)

    @contextlib.asynccontextmanager
    async def quiet(self, key: PoolKey, settle_s: float) -> AsyncIterator[None]:
        """No worker for ``key`` starts meanwhile, and those starting are up first and those
        leaving gone (waiting at most ``settle_s``): a CUDA context's creation or teardown
        disturbs timings."""
        self._quiet[key] = self._quiet.get(key, 0) + 1
        try:
            await self.settled(key, settle_s)
            yield
        finally:
            self._quiet[key] -= 1
            self.replenish(key)

    def starting_roots(self, key: PoolKey) -> list[int]:
        """The outer processes of ``key``'s workers still starting (each the root of its
        worker's processes)."""
        return list(self._starting_roots.get(key, ()))

    async def settled(self, key: PoolKey, wait_s: float) -> None:
        """Wait (at most ``wait_s``) until no worker for ``key`` is starting or leaving."""
        deadline = time.monotonic() + wait_s
        while (self._starting.get(key, 0) > 0 or self._made_for_jobs.get(key, 0) > 0
               or self._departing.get(key)) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    def replenish(self, key: PoolKey) -> None:
        """Fork workers in the background until ``key`` has its spares and its waiting jobs
        each have a worker on the way."""
        if self._closed or not self.settings.spare_workers:
            return
        quiet = self._quiet.get(key, 0) > 0
        if quiet and not self._waiting.get(key):
            return  # quiet(): started when it ends
        # while quiet, only the workers jobs wait for; the spares when it ends
        waiting = len(self._waiting.get(key, ()))
        have = len(self._ready.get(key, ())) + self._starting.get(key, 0)
        want = (0 if quiet else self.spares(key)) + waiting - have
        if not waiting and not quiet and want < refill_batch(self.spares(key)):
            return  # later, with the rest: starts side by side cost the timings less
        for _ in range(max(0, want)):
            self._starting[key] = self._starting.get(key, 0) + 1
            self._background(self._add_spare(key, self._next_warm(key)))

    def _next_warm(self, key: PoolKey) -> Warm | None:
        """What the next spare for ``key`` warms: what a taken one had to (the mix follows the
        jobs), or, with nothing owed (the first spares), with and without cuBLAS in turn, each
        rehearsing a comparison (which serves a kernel alone too, where the reverse would
        leave a comparison's pairing cold)."""
        owed = self._owed.get(key)
        if owed:
            return owed.popleft()
        self._fills[key] = self._fills.get(key, 0) + 1
        return self.warm(key, Needs(cublas=self._fills[key] % 2 == 1))

    async def _add_spare(self, key: PoolKey, warm: Warm | None) -> None:
        waiting = self._waiting.setdefault(key, deque())
        try:
            worker = await self.spawn(key, warm=warm)
        except Exception as exc:  # noqa: BLE001 - a waiting job hears of it; spares retry later
            log.warning("could not start a spare worker (%s): %s", key.name, exc)
            self._starting[key] -= 1
            while waiting:
                waiter = waiting.popleft()
                if not waiter.done():
                    waiter.set_exception(WorkerDied(f"could not start a worker: {exc}"))
                    break
            return
        self._starting[key] -= 1
        if self._closed:
            await worker.close(grace=1)
            return
        for gone in [w for w in waiting if w.done()]:
            waiting.remove(gone)
        if waiting:
            # the first job waiting for what this worker warmed, else the first job waiting
            waiter = next((w for w in waiting if self._wants.get(w) == worker.warmed),
                          waiting[0])
            waiting.remove(waiter)
            waiter.set_result(worker)
            self.replenish(key)
            return
        self._ready.setdefault(key, deque()).append(worker)

    def spares(self, key: PoolKey) -> int:
        """How many ready workers ``key`` keeps."""
        if self.settings.spares_per_gpu is not None:
            return self.settings.spares_per_gpu
        if key.gpu_id is None:
            return DEFAULT_CPU_SPARES
        return auto_spares(self.gpu_memory_mb.get(key.gpu_id))

    def ready_count(self) -> int:
        return sum(len(q) for q in self._ready.values())

    def starting_count(self) -> int:
        return sum(self._starting.values()) + sum(self._made_for_jobs.values())

    def release(self, worker: Worker) -> None:
        """A worker whose job is over: let it exit in the background and remove its scratch."""
        self._background(self._retire(worker))

    async def _retire(self, worker: Worker) -> None:
        await worker.close()
        await self.blocking(_remove_tree, worker.scratch)

    def background(self, coro: Any) -> None:
        """Run ``coro`` as a task the pool waits for when it closes."""
        self._background(coro)

    def _background(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        self._closed = True
        for waiter in (w for q in self._waiting.values() for w in q):
            if not waiter.done():
                waiter.set_exception(WorkerDied("the server is shutting down"))
        workers = [w for q in self._ready.values() for w in q]
        self._ready.clear()
        await asyncio.gather(*(w.close(grace=2) for w in workers), return_exceptions=True)
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self.zygotes.close()
        self.blocking.close()


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)

