"""The CPU build stage: torch_cuda sources are built before their job takes a GPU.

``load_inline`` builds take nvcc tens of seconds; a GPU held meanwhile is wasted. So a
sandboxed CPU worker imports the source first, its ``load_inline`` calls going through the
content-addressed build cache (``BUILD_WORKERS`` builds at once); the GPU workers then load
the built extension from the cache in milliseconds. A failing build is the job's verdict
(``compile_error``), and no GPU was taken.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from orchestration import verdicts
from orchestration.job_step import Clock, JobStep, Side, Stage
from orchestration.worker import WorkerDied
from orchestration.worker_pool import PoolKey, WorkerPool
from shared.models import KernelType, WorkerJob, WorkerResult
from shared.protocol import Failure, InternalError, Load, Loaded, Role

ProgressFn = Callable[[str, float], Awaitable[None]]


class BuildStage:
    def __init__(self, workers: WorkerPool, at_once: int) -> None:
        self.workers = workers
        self.slots = asyncio.Semaphore(at_once)
        self.stats = {"hits": 0, "lookups": 0}

    async def run(self, job: WorkerJob, timeout: float, step: JobStep, clock: Clock,
                  progress: ProgressFn) -> WorkerResult | None:
        """Build the job's torch_cuda sources; a verdict if a build failed, else None."""
        kernels = [(Side.KERNEL if job.kind == "compare" else Side.ALONE, job.kernel)]
        if job.ref_kernel is not None:
            kernels.append((Side.REFERENCE, job.ref_kernel))
        async with self.slots:
            clock.lap("queue_wait")
            await progress("building", 0.02)
            for side, kernel in kernels:
                if kernel.kernel_type != KernelType.TORCH_CUDA:
                    continue
                step.set(side, Stage.BUILDING)
                verdict = await self._build(job, kernel, side, timeout, step)
                clock.lap("build")
                if verdict is not None:
                    return verdict
        return None

    async def _build(self, job: WorkerJob, kernel: object, side: Side, timeout: float,
                     step: JobStep) -> WorkerResult | None:
        key = PoolKey(None, build=True)
        try:
            builder = await self.workers.take(key)
        except WorkerDied as exc:  # no user code has run yet: the server's fault
            raise RuntimeError(f"could not start a build worker: {exc}") from exc
        one = job.model_copy(update={"kernel": kernel, "ref_kernel": None, "kind": "validate"})
        try:
            reply, fds = await asyncio.wait_for(
                builder.call(Load(job=one, role=Role.BUILD)), timeout)
        except asyncio.TimeoutError:
            builder.kill()
            return verdicts.timed_out(job, timeout, step)
        except WorkerDied:
            builder.kill()
            return verdicts.crashed(job, step, [await builder.exit_status(5)])
        finally:
            self.workers.release(builder)
        for fd in fds:
            _close(fd)
        if isinstance(reply, Failure):
            return verdicts.from_failure(job, side, reply)
        if isinstance(reply, InternalError):
            return verdicts.worker_fault(job, side, step, reply.message)
        if not isinstance(reply, Loaded):
            return verdicts.protocol_violation(job, side, step, type(reply).__name__)
        for build in reply.builds:
            self.stats["lookups"] += 1
            self.stats["hits"] += int(build.cached)
        return None


def _close(fd: int) -> None:
    import os

    try:
        os.close(fd)
    except OSError:
        pass
