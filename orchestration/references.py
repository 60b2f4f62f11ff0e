"""The reference side of comparisons: judges kept for the next candidate, figures taken once.

A search loop or a batch sends many candidates against one reference. Each comparison needs a
judge with the reference loaded (:mod:`judge.session`) and the reference's timing. Here:

- a judge that served a comparison is **kept** for the next one with the same reference on the
  same device for :data:`LINGER_S` (its reference stays compiled, its trial 0 made; every
  pairing still gets its own secret and the reference's module state as loaded), then let go.
  The first timing on its device while it is idle stops its processes, and they stay stopped
  until it is leased again (:meth:`orchestration.placement.LocalSeat.resume`).
  Only the reference's code runs in a judge, so one judge serving many candidates keeps the
  rule that one job's code never shares a process with another job's;
- the reference's **figure** (its timing) is taken once per reference and GPU type and shared
  (:class:`orchestration.ref_cache.ReferenceFigures`): a batch's candidates are all ranked
  against one baseline, and the result says which job took it.

A judge in trouble (it timed out, crashed, or its job ended mid-step) is killed, never kept.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from orchestration.job_step import Side, Stage
from orchestration.placement import Placement, Seat
from orchestration.worker import Worker
from orchestration.worker_kinds import Needs
from orchestration.worker_pool import PoolKey
from shared.models import WorkerJob
from shared.protocol import Load, Loaded, Role

LINGER_S = 10.0
# A judge's calibration (the null call it measured with a fresh partner, before that partner
# loaded any code) serves its next pairings of the same layout for this long: a calibration
# is a timing, so it waits for the last job's processes to be gone and holds the device
# alone, and a batch's candidate that reuses one is loaded and checked while the last
# candidate's context is torn down. The null calls between the samples still replace it
# where they read less. The comparison whose job measured it (timing its reference) keeps it
# whatever its age: both sides of that comparison are then judged by one figure.
KEEP_CALIBRATION_S = 2.0
# how many of a judge's latest pairings the server follows (the judge keeps fewer arenas)
PAIRINGS_KEPT = 4


@dataclass
class Calibration:
    """What the server knows of the calibration a judge keeps (``judge.session``: ``kept``)."""

    streams: bool  # its partner was made for streams (8 hardware queues, not 1)
    taken_at: float  # time.monotonic()
    by_job: str

    def unfit(self, streams: bool, now: float, job: str) -> str | None:
        """Why it may not calibrate job ``job``'s pairing with a partner made for ``streams``
        at ``now``; None when it may (the judge still checks the arena's layout is the
        same)."""
        if now - self.taken_at > KEEP_CALIBRATION_S and job != self.by_job:
            return f"older than {KEEP_CALIBRATION_S:g} s"
        if self.streams != streams:
            return "taken with a partner of another number of hardware queues"
        return None


@dataclass
class Judge:
    """A judge worker with a reference loaded."""

    worker: Worker
    key: str  # the reference's key (see ref_cache.reference_key)
    loaded: Loaded
    device: PoolKey
    idle_since: float = field(default_factory=time.monotonic)
    reused: bool = False
    calibration: Calibration | None = None
    # its latest pairings' kernel's processes by pairing number (see :meth:`free_pairings`)
    partners: dict[int, Worker] = field(default_factory=dict)

    def paired_with(self, kernel: Worker) -> int:
        """The number of a new pairing with ``kernel`` (1, 2, ...)."""
        number = max(self.partners, default=0) + 1
        self.partners[number] = kernel
        for old in sorted(self.partners)[:-PAIRINGS_KEPT]:
            del self.partners[old]
        return number

    def free_pairings(self) -> list[int]:
        """The pairings whose kernel's process is gone with every process it started (its
        pid namespace is empty), so nothing maps the arena the judge kept from them."""
        return [n for n, kernel in self.partners.items()
                if kernel.contained and kernel.status is not None]


class Judges:
    """Idle judges by (reference, device); at most one job uses a judge at a time."""

    def __init__(self, placement: Placement, linger_s: float = LINGER_S) -> None:
        self.placement = placement
        self.linger_s = linger_s
        self._idle: dict[tuple[str, PoolKey], list[Judge]] = {}
        self._reaper: asyncio.Task[None] | None = None
        self.hits = 0
        self.lookups = 0

    async def lease(self, job: WorkerJob, key: str, seat: Seat) -> Judge:
        """A judge for ``job``'s reference on ``seat``'s device: an idle one, or a new one
        loaded now (raises :class:`~orchestration.placement.KernelFailed` when the reference
        does not compile)."""
        self.lookups += 1
        idle = self._idle.get((key, seat.key), [])
        while idle:
            judge = idle.pop()
            if judge.worker.status is None and not judge.worker.killed:
                self.hits += 1
                judge.reused = True
                judge.worker.output.take()  # what it printed between jobs is nobody's
                await seat.lend(judge.worker)
                return judge
        worker = await seat.take("reference (judge)",
                                 Needs.of(job.ref_kernel.source_code if job.ref_kernel
                                          else None))
        loaded = await seat.call(worker, Side.REFERENCE, Stage.COMPILING,
                                 Load(job=job, role=Role.JUDGE), Loaded)
        seat.disown(worker)
        return Judge(worker, key, loaded, seat.key)

    def give_back(self, judge: Judge, seat: Seat, healthy: bool) -> None:
        """The job is done with ``judge``: kept for the next candidate when ``healthy``. What
        it printed meanwhile goes to the job's log."""
        seat.release(judge.worker, True)
        if not healthy or self.linger_s <= 0:
            self._kill(judge)
            return
        judge.idle_since = time.monotonic()
        self._idle.setdefault((judge.key, judge.device), []).append(judge)
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.create_task(self._reap())

    def _kill(self, judge: Judge) -> None:
        workers = self.placement.workers
        self.placement.kept_stopped.pop(judge.worker, None)
        judge.worker.kill()
        workers.depart(judge.device, [judge.worker])
        workers.release(judge.worker)

    def idle_workers(self, device: PoolKey) -> list[Worker]:
        """The processes of ``device``'s idle judges: they ran a reference's code."""
        return [judge.worker for (_, where), judges in self._idle.items() if where == device
                for judge in judges]

    def idle_count(self) -> int:
        return sum(len(v) for v in self._idle.values())

    def shed(self, device: PoolKey) -> int:
        """Let every idle judge of ``device`` go (their memory is a job's for a while)."""
        gone = 0
        for (ref, where), judges in list(self._idle.items()):
            if where == device:
                for judge in judges:
                    self._kill(judge)
                    gone += 1
                del self._idle[(ref, where)]
        return gone

    async def _reap(self) -> None:
        while self._idle:
            await asyncio.sleep(min(1.0, self.linger_s))
            now = time.monotonic()
            for place, judges in list(self._idle.items()):
                keep = []
                for judge in judges:
                    if now - judge.idle_since >= self.linger_s or judge.worker.status is not None:
                        self._kill(judge)
                    else:
                        keep.append(judge)
                if keep:
                    self._idle[place] = keep
                else:
                    del self._idle[place]

    def close(self) -> None:
        for judges in self._idle.values():
            for judge in judges:
                self._kill(judge)
        self._idle.clear()
        if self._reaper is not None:
            self._reaper.cancel()
