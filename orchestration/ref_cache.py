"""Reference figures: a reference's timing, taken once and shared by every comparison with it.

Search loops compare thousands of candidates against one reference, and a batch ranks its
candidates against one baseline. The reference's timing (the judge's raw samples of it, on
fresh inputs, before any candidate was loaded anywhere) is the same measurement each time the
reference source, its IO contract, the timing settings and the GPU type are (the key,
:func:`reference_key`), so it is taken once:

- **single flight**: comparisons that want the same figure at once wait for the first one's
  measurement instead of each taking their own (a batch's candidates, concurrent /compares,
  the slots of a Ray node, which share the cache's directory: a lock file per entry);
- **kept**: under ``CACHE_DIR``'s ``references/``, within ``REF_CACHE_BYTES`` (oldest entries go first), so
  the next comparison, after a restart too, reuses it. Only a figure the server found
  undisturbed is kept (not flagged, not measured again): a reference timed while something
  slowed it must not become every later candidate's baseline;
- **one per batch**: the candidates of one batch share one figure even where it was not
  kept for others (disturbed, or ``reuse_reference: false``): it is kept under the batch's own
  key, in memory and in the directory (the batch's candidates may run on several slots of a
  Ray node), so a batch ranks its candidates against one baseline.

Correctness is never cached: every pairing runs the reference on its own secret inputs.
Entries are written by the server, never by a worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ValidationError

from shared.keys import content_key
from shared.models import WorkerJob
from shared.protocol import KernelTimed

VERSION = 8  # bump whenever what an entry holds changes (8: the judge's count of the work)
RECENT = 64  # figures kept in memory as well


def reference_key(job: WorkerJob, gpu_type: str) -> str:
    assert job.ref_kernel is not None
    return content_key("reference", VERSION, job.ref_kernel.model_dump(mode="json"),
                     job.num_trials, job.device, gpu_type)


class Figure(BaseModel):
    """One reference's timing as its judge took it, and which job took it."""

    timed: KernelTimed
    timed_by_job: str
    gpu_state: dict[str, object] | None = None


@dataclass
class Found:
    figure: Figure
    reused: bool  # taken by another job (this run, or stored)
    keep: bool = True  # whether it may be stored (set by the caller's verdict)


class ReferenceFigures:
    def __init__(self, root: Path, budget_bytes: int) -> None:
        self.root = Path(root)
        self.budget = budget_bytes
        self.hits = 0
        self.lookups = 0
        self._locks: dict[str, asyncio.Lock] = {}
        # figures kept in memory too, for a cache too small (or off) to hold them on disk
        self._recent: dict[str, Figure] = {}
        # each recent batch's own figure, whatever its verdict: one baseline per batch
        self._batches: dict[str, Figure] = {}

    async def get(self, key: str, measure: Callable[[], Awaitable[tuple[Figure, bool]]],
                  reuse: bool = True, batch: str | None = None) -> Found:
        """The figure for ``key``: kept, or measured now by ``measure`` (which says whether
        its figure may be kept) while every other comparison that wants it waits: the other
        jobs of this server, and those of other servers sharing the cache's directory (the
        slots of a Ray node), through a lock file beside the entry.

        Within a ``batch`` the figure is measured once whatever its verdict and ``reuse``:
        every candidate of the batch is divided by the same figure (one that was not kept,
        being disturbed, or not to be reused, stays this batch's alone)."""
        if batch is not None:
            return await self._batch_figure(key, f"{key}@{batch}", measure, reuse)
        return await self._get(key, measure, reuse)

    async def _batch_figure(self, key: str, scoped: str,
                            measure: Callable[[], Awaitable[tuple[Figure, bool]]],
                            reuse: bool) -> Found:
        """The batch's one figure: kept under ``scoped`` (in memory, and on disk for the
        other servers on this directory, whose slots run the batch's other candidates)."""
        async with self._locks.setdefault(scoped, asyncio.Lock()):
            figure = self._batches.get(scoped) or self.load(scoped)
            if figure is None:
                held = await asyncio.to_thread(self._lock_file, scoped)
                try:
                    figure = self.load(scoped)  # another server's slot measured it meanwhile
                    if figure is None:
                        found = await self._get(key, measure, reuse)
                        self.store(scoped, found.figure)
                        self._keep_batch(scoped, found.figure)
                        return found
                finally:
                    _unlock(held)
                    # the figure is stored (or the cache is off): no one needs the lock again
                    with contextlib.suppress(OSError):
                        (self.root / f"{scoped}.lock").unlink()
            self.lookups += 1
            self.hits += 1
            self._keep_batch(scoped, figure)
            return Found(figure, reused=True, keep=False)

    def _keep_batch(self, scoped: str, figure: Figure) -> None:
        self._batches[scoped] = figure
        for gone in list(self._batches)[:-RECENT]:  # an old batch's, and its lock
            del self._batches[gone]
            lock = self._locks.get(gone)
            if lock is not None and not lock.locked():
                del self._locks[gone]

    async def _get(self, key: str, measure: Callable[[], Awaitable[tuple[Figure, bool]]],
                   reuse: bool) -> Found:
        if not reuse:
            figure, _ = await measure()
            return Found(figure, reused=False)
        self.lookups += 1
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            found = self._kept(key)
            if found is not None:
                return found
            held = await asyncio.to_thread(self._lock_file, key)
            try:
                found = self._kept(key)  # another process measured it meanwhile
                if found is not None:
                    return found
                figure, keep = await measure()
                if keep:
                    self._recent[key] = figure
                    self._recent = dict(list(self._recent.items())[-RECENT:])
                    self.store(key, figure)
                return Found(figure, reused=False, keep=keep)
            finally:
                _unlock(held)

    def _kept(self, key: str) -> Found | None:
        figure = self._recent.get(key) or self.load(key)
        if figure is None:
            return None
        self.hits += 1
        return Found(figure, reused=True)

    def _lock_file(self, key: str) -> int | None:
        """An exclusive lock on ``key``'s lock file (None where the directory cannot have
        one: then only this server's jobs wait for each other)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.root / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return None
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    # ---- the disk

    def _path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def load(self, key: str) -> Figure | None:
        path = self._path(key)
        try:
            figure = Figure.model_validate_json(path.read_bytes())
        except (OSError, ValidationError, ValueError):
            return None
        os.utime(path)  # recently used: the last to go
        return figure

    def store(self, key: str, figure: Figure) -> None:
        if self.budget <= 0:
            return
        data = figure.model_dump_json().encode()
        if len(data) > self.budget:
            return
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = self._path(key).with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(data)
            os.replace(tmp, self._path(key))
            self._evict()
        except OSError:
            return

    def _evict(self) -> None:
        entries = []
        for path in self.root.glob("*.json"):
            try:
                st = path.stat()
            except OSError:
                continue
            entries.append((st.st_mtime, st.st_size, path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.budget:
                break
            try:
                path.unlink()
                total -= size
            except OSError:
                pass



def _unlock(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
