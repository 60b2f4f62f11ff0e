"""A kernel process's JIT caches across jobs of one source (orchestration/jit_store.py): the
entry handed over with its Load, and what it compiled filed after a successful job."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass

from orchestration.job_step import Side, Stage
from orchestration.placement import Seat
from orchestration.worker import Worker
from shared.models import JitCache, WorkerJob
from shared.protocol import ExportJit, JitExported, Load, Loaded, Role

log = logging.getLogger("kernel_eval.jit_store")

EXPORT_TIMEOUT_S = 20.0  # a process that does not hand its caches over by then is killed


@dataclass
class JitUse:
    key: str
    restored: bool


async def load(seat: Seat, worker: Worker, side: Side, job: WorkerJob) -> Loaded:
    """Load ``job``'s kernel in ``worker``, with the caches an earlier job of its source left."""
    store = seat.jit
    fd = None
    if store is not None and store.enabled:
        key = store.key(job.kernel)
        fd = store.seed(key)
        worker.jit = JitUse(key, restored=fd is not None)
    try:
        return await seat.call(worker, side, Stage.COMPILING,
                               Load(job=job, role=Role.KERNEL, jit_seed=fd is not None), Loaded,
                               fds=[fd] if fd is not None else None)
    finally:
        if fd is not None:
            os.close(fd)


async def keep(seat: Seat, worker: Worker, side: Side) -> JitCache | None:
    """After a successful job: what the source compiled (``new_files`` 0 after a restore: it
    compiled nothing), and the caches filed when its source had no entry yet. Never changes
    the job's verdict: a process that fails here only loses its entry."""
    use, store = worker.jit, seat.jit
    if use is None or store is None or not store.enabled:
        return None
    read_fd, write_fd = os.pipe() if not use.restored else (None, None)
    reader = (asyncio.create_task(asyncio.to_thread(store.receive, read_fd, use.key))
              if read_fd is not None else None)
    try:
        reply = await asyncio.wait_for(
            seat.call(worker, side, Stage.RUNNING, ExportJit(send=write_fd is not None),
                      JitExported, fds=[write_fd] if write_fd is not None else None),
            EXPORT_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - the job's verdict stands whatever happens here
        log.debug("a kernel process did not hand its JIT caches over: %r", exc)
        worker.kill()
        reply = None
    finally:
        if write_fd is not None:
            with contextlib.suppress(OSError):
                os.close(write_fd)
    kept = await reader if reader is not None else 0
    if reply is None:
        return None
    return JitCache(restored=use.restored, files=reply.files, new_files=reply.added,
                    new_file_names=reply.added_names, kept_bytes=kept)
