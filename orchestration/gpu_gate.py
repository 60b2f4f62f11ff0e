"""Who may use a GPU at a moment: several jobs' untimed steps at once, a timing alone.

With ``JOBS_PER_GPU`` above 1 a GPU holds several jobs. Their untimed requests (compiling,
correctness trials, checks) share it; a timing (and an ncu pass, and a memory retry) has it
to itself:

- :meth:`GpuGate.shared` lets a request in while no one holds or waits for the GPU alone;
- :meth:`GpuGate.exclusive` waits, in arrival order, until the shared requests in flight are
  done, and keeps new ones out until it ends (a waiting timing is not starved by a stream of
  untimed requests);
- an owner (a job) holding the GPU alone passes its own shared requests through.

While a job has the GPU to itself the other jobs' processes are idle between requests, but
their code is still loaded: :func:`freeze` stops them (every process of their namespace,
SIGSTOP) so no thread of theirs launches work on the GPU during the timing, and
:func:`thaw` lets them go on after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import Any

# How long freeze() waits for a signalled process to be stopped (one in a system call stops
# when it returns to user space).
STOP_SETTLE_S = 0.5


class GpuGate:
    """The shared/alone arbitration of one GPU (an asyncio reader-writer lock, writers first
    and in arrival order)."""

    def __init__(self, drain: bool = True) -> None:
        # whether being alone waits for the requests in flight to end: on a GPU their work
        # runs on without them (what they launched); on the CPU stopping their processes
        # (see freeze) stops all of it, so a slow request (an import that sleeps) keeps no
        # other job's timing waiting
        self.drain = drain
        self._shared = 0  # requests in flight
        self._alone: Any = None  # the owner holding the GPU alone
        self._queue: deque[tuple[Any, asyncio.Future[None]]] = deque()  # waiting to be alone
        self._changed = asyncio.Event()

    @property
    def alone(self) -> Any:
        """The owner with the GPU to itself now, or None."""
        return self._alone

    def shared_in_flight(self) -> int:
        return self._shared

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()
        while self._alone is None and (self._shared == 0 or not self.drain) and self._queue:
            owner, ready = self._queue.popleft()
            if ready.done():  # cancelled: it gave up waiting, and hears no more
                continue
            self._alone = owner
            ready.set_result(None)

    @contextlib.asynccontextmanager
    async def shared(self, owner: Any) -> AsyncIterator[float]:
        """Run one untimed request; yields the seconds it waited to get in."""
        if owner is not None and owner == self._alone:
            yield 0.0
            return
        began = time.monotonic()
        while self._alone is not None or self._queue:
            await self._changed.wait()
        self._shared += 1
        try:
            yield time.monotonic() - began
        finally:
            self._shared -= 1
            self._notify()

    @contextlib.asynccontextmanager
    async def exclusive(self, owner: Any) -> AsyncIterator[float]:
        """Have the GPU alone (re-entrant for ``owner``); yields the seconds it waited."""
        if owner is not None and owner == self._alone:
            yield 0.0
            return
        began = time.monotonic()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((owner, ready))
        self._notify()
        try:
            await ready
        except BaseException:
            if ready.done() and not ready.cancelled():
                self._alone = None  # granted as it gave up: hand it on
            elif (owner, ready) in self._queue:
                self._queue.remove((owner, ready))
            self._notify()
            raise
        try:
            yield time.monotonic() - began
        finally:
            self._alone = None
            self._notify()


class GpuGates:
    """One :class:`GpuGate` per key (a GPU's pool key)."""

    def __init__(self, drain: bool = True) -> None:
        self.drain = drain
        self._gates: dict[Any, GpuGate] = {}

    def __getitem__(self, key: Any) -> GpuGate:
        gate = self._gates.get(key)
        if gate is None:
            gate = self._gates[key] = GpuGate(self.drain)
        return gate


# ---- stopping the other jobs' processes


def process_tree(root: int, every_thread: bool = True) -> list[int]:
    """``root`` and every process below it (from /proc's children lists; a process outside a
    namespace's init is still below it). ``every_thread`` False: only the children each
    process's main thread forked (see :func:`children`)."""
    found: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.append(pid)
        todo.extend(children(pid, every_thread))
    return found


def children(pid: int, every_thread: bool = True) -> list[int]:
    """The pids of ``pid``'s children, of all its threads, or of its main thread alone
    (``every_thread`` False: a tree of the harness's own processes, whose main threads fork
    them, read with a file per process instead of one per thread); none where the kernel does
    not list them, or once it is gone."""
    kids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task") if every_thread else [str(pid)]
    except OSError:
        return kids
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return kids


def freeze(roots: Iterable[int], settle_s: float = STOP_SETTLE_S,
           harness_roots: Iterable[int] = ()) -> tuple[list[int], list[str]]:
    """SIGSTOP every process of each root's tree, again until no new one appears (a stopped
    process forks no more), and wait (at most ``settle_s``) until each has stopped: (the pids
    signalled, problems met). ``harness_roots``: trees that run no user code yet (workers
    still starting), whose processes only their main threads fork: read one file a process,
    not one a thread."""
    trees = [(root, True) for root in roots] + [(root, False) for root in harness_roots]
    stopped: list[int] = []
    problems: list[str] = []
    for _ in range(8):
        new = [p for root, every in trees for p in process_tree(root, every)
               if p not in stopped]
        if not new:
            break
        for pid in new:
            try:
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
            except ProcessLookupError:
                continue
            except PermissionError as exc:
                problems.append(f"pid {pid}: {exc}")
                stopped.append(pid)  # not again
    deadline = time.monotonic() + settle_s
    running = [p for p in stopped if not _stopped(p)]
    while running and time.monotonic() < deadline:
        time.sleep(0.001)
        running = [p for p in running if not _stopped(p)]
    if running:
        problems.append(f"{len(running)} processes not yet stopped after {settle_s:.1f} s")
    return stopped, problems


def _stopped(pid: int) -> bool:
    """Stopped, or gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("T", "t", "Z", "X")


def thaw(pids: Iterable[int]) -> None:
    """SIGCONT what :func:`freeze` stopped."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGCONT)
