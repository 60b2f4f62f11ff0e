"""One slot of a Ray cluster, on its node: a :class:`LocalExecutor` with exactly one GPU.

The Ray executor (:mod:`orchestration.ray_executor`) places one :class:`NodeRunner` actor per
GPU of the cluster (``num_gpus=1``; in CPU mode one per unit of the ``kes_slot`` resource).
The actor runs each job as the local executor does on the server's host (zygote, ready
sandboxed workers, the checker process, the bound timer, the server-side statistics) but on
directories of its own node, under ``RAY_NODE_DIR``, since the server's paths do not exist
there::

    <RAY_NODE_DIR>/builds          the build cache, shared by the node's slots
    <RAY_NODE_DIR>/references      reference results for reuse, shared by the node's slots
    <RAY_NODE_DIR>/cupy            CuPy's kernel cache
    <RAY_NODE_DIR>/slots/<name>/   one slot's job files and worker scratch (gone at close)

What the server keeps travels back in the actor's answers: the verdict with :meth:`run`, the
job's worker log with :meth:`take_log`. There is no job store on a node.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path

from pydantic import BaseModel, Field

from orchestration.device_probe import probe_device
from orchestration.executor import LocalExecutor
from orchestration.gpu_pool import Slot
from shared.models import GPUInfo, WorkerJob, WorkerResult
from shared.settings import Settings

log = logging.getLogger("kernel_eval.ray_node")

# A good job's log is written a moment after its answer, once its workers have exited.
LOG_WAIT_S = 20.0


class SlotInfo(BaseModel):
    """Where a slot runs and what it has done, as its actor reports it to the server."""

    node_id: str
    address: str
    pid: int
    gpu: GPUInfo | None = None  # the node's GPU this slot holds; None in CPU mode
    isolation: str = "none"
    isolation_detail: str = ""
    ready_workers: int = 0
    # Counters of this actor process since it started (a restarted actor starts from zero).
    cache: dict[str, dict[str, int]] = Field(default_factory=dict)


class NodeReply(BaseModel):
    """A job's answer from its node."""

    result: WorkerResult
    gpu_id: int | None = None
    info: SlotInfo


def node_settings(settings: Settings, name: str) -> Settings:
    """The server's settings with every path on this node, under ``RAY_NODE_DIR``."""
    root = settings.ray_node_dir.expanduser()
    jobs = root / "slots" / name / "jobs"
    return replace(
        settings, job_dir=jobs,
        # A node has no job store; the path only names a directory workers must not see.
        job_store_path=jobs / "no-job-store",
        build_cache_dir=root / "builds", ref_cache_dir=root / "references",
        cupy_cache_dir=root / "cupy", jit_cache_dir=root / "jit",
        python_executable=sys.executable,
        gpu_devices=None, max_workers=1, api_key=None,
    )


class NodeRunner:
    """A Ray actor: one GPU (or CPU slot) of its node, one job at a time.

    Ray runs its methods on one event loop (an async actor); the server sends a job only to
    an idle slot, while :meth:`progress` and :meth:`take_log` may come at any time. After a
    restart (Ray re-creates a lost actor) the executor is started again on first use.
    """

    def __init__(self, settings: Settings, device: str, name: str) -> None:
        self.settings = node_settings(settings, name)
        self.device = device
        self.executor: LocalExecutor | None = None
        self.gpu: GPUInfo | None = None
        self._opening: asyncio.Task[None] | None = None
        self._progress: dict[str, tuple[str, float]] = {}

    async def ready(self) -> SlotInfo:
        """Start this slot's executor (once) and say where it runs."""
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._open())
        await asyncio.shield(self._opening)
        return self.info()

    async def run(self, job: WorkerJob, timeout: float) -> NodeReply:
        """Run ``job`` here, on this node's directories; never raises for a kernel's fault."""
        await self.ready()
        assert self.executor is not None
        work = self.settings.job_dir / job.job_id
        job = job.model_copy(update={"work_dir": str(work),
                                     "cache_dir": str(self.settings.build_cache_dir)})
        work.mkdir(parents=True, exist_ok=True)
        # The device-metrics pass reads the job from here, as on the server's host.
        (work / "request.json").write_text(job.model_dump_json())

        async def progress(message: str, fraction: float) -> None:
            self._progress[job.job_id] = (message, fraction)

        try:
            result = await self.executor.run(job, timeout, progress)
        finally:
            self._progress.pop(job.job_id, None)
        return NodeReply(result=result, gpu_id=job.gpu_id, info=self.info())

    async def progress(self, job_id: str) -> tuple[str, float] | None:
        """The last progress of a job running here."""
        return self._progress.get(job_id)

    async def take_log(self, job_id: str) -> str | None:
        """A finished job's worker log, once written; then its files here are removed."""
        if self.executor is not None:
            await self.executor.log_saved(job_id, LOG_WAIT_S)
        work = self.settings.job_dir / job_id
        return await asyncio.to_thread(_read_and_remove, work)

    async def close(self) -> None:
        """Stop the workers and remove this slot's files (the node's caches stay)."""
        if self.executor is not None:
            await self.executor.close()
        await asyncio.to_thread(shutil.rmtree, self.settings.job_dir.parent, True)

    def info(self) -> SlotInfo:
        import ray

        status = self.executor.status() if self.executor is not None else None
        return SlotInfo(
            node_id=ray.get_runtime_context().get_node_id(),
            address=ray.util.get_node_ip_address(), pid=os.getpid(), gpu=self.gpu,
            isolation=status.isolation if status else "none",
            isolation_detail=status.isolation_detail if status else "",
            ready_workers=status.workers_ready if status else 0,
            cache=status.cache if status else {},
        )

    async def _open(self) -> None:
        # A restarted actor finds its predecessor's files: no job of theirs will be asked for.
        await asyncio.to_thread(shutil.rmtree, self.settings.job_dir.parent, True)
        self.settings.job_dir.mkdir(parents=True)
        gpu_id: int | None = None
        env: dict[str, str] = {}
        if self.device == "cuda":
            import ray

            # Ray set CUDA_VISIBLE_DEVICES to the GPU it gave this actor: the probe sees that one.
            gpu_id = int(ray.get_gpu_ids()[0])
            probed = await probe_device(replace(self.settings, device="cuda"))
            self.gpu = probed.gpus[0].model_copy(update={"id": gpu_id})
            if probed.capability:
                env["TORCH_CUDA_ARCH_LIST"] = probed.capability
        gpus = [self.gpu] if self.gpu is not None and gpu_id is not None else []
        executor = LocalExecutor(self.settings, self.device, [Slot(0, gpu_id)], gpus, env)
        await executor.start()
        self.executor = executor
        log.info("slot ready on this node (%s, %s)", self.device,
                 f"GPU {gpu_id}" if gpu_id is not None else "CPU")


def _read_and_remove(work: Path) -> str | None:
    try:
        return (work / "worker.log").read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    finally:
        shutil.rmtree(work, ignore_errors=True)

