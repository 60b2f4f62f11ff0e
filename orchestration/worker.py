"""One sandboxed job process, as the server sees it (:class:`Worker`; the pool that forks them
ahead of demand is :mod:`orchestration.worker_pool`).

A worker is a trusted control socket (the sandbox's outer process reports the job process's
pid and, at the end, its wait status), the job socket (requests and replies), and its
stdout+stderr, pumped in chunks into a bounded
:class:`~orchestration.output_capture.OutputCapture` so that it never blocks on its output.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from orchestration.gpu_gate import children
from orchestration.output_capture import OutputCapture, pump
from orchestration.worker_kinds import Warm
from shared.channel import Channel, ChannelClosed, ProtocolError
from shared.protocol import (
    HOST_REPLIES,
    REPLIES,
    Exit,
    Exited,
    InternalError,
    Message,
    Ready,
    Reply,
    Started,
)


class BlockingCalls:
    """Threads for the channels' blocking reads and writes, owned by one pool.

    A channel read blocks until its worker answers, and every live worker has a read pending
    on its control socket: they get threads of their own, not asyncio's small default pool
    (which a few dozen workers would exhaust, stalling every other blocking call).
    """

    def __init__(self, threads: int = 512) -> None:
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="kes-channel")

    async def __call__(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def close(self) -> None:
        self._pool.shutdown(wait=False)


class WorkerDied(RuntimeError):
    """A worker's channel closed before it answered: it crashed or was killed."""


class Worker:
    """One sandboxed job process, as the server sees it."""

    def __init__(self, ctrl: Channel, chan: Channel, out_fd: int, scratch: Path,
                 blocking: BlockingCalls) -> None:
        self.blocking = blocking
        self.ctrl = ctrl
        self.chan = chan
        self.scratch = scratch
        self.pid: int | None = None
        self.output = OutputCapture()
        self.status: int | None = None  # the job process's wait status, once it is gone
        self.max_rss_bytes = 0  # the host memory its processes held at most (once gone)
        self.killed = False  # the server killed it (else a SIGKILL came from elsewhere)
        self.killed_at: float | None = None  # time.monotonic() of the server's first kill
        self._out_fd = out_fd
        self._tasks: list[asyncio.Task[Any]] = []
        self._pump_task: asyncio.Task[Any] | None = None  # reads its output (start)
        self._gone = asyncio.Event()
        self.ready = False
        self.label = "worker"
        self.startup: dict[str, float] = {}
        self.jit: Any = None  # its source's entry in the JIT store, once loaded (flows/jit.py)
        self.queues: str | None = None  # its context's hardware work queues (GPU workers)
        # its processes live in a pid namespace of their own: once it is gone, so is every
        # process it started (and every mapping they held)
        self.contained = False
        # what it warmed beside its context (GPU workers: worker_kinds.Warm)
        self.warmed: Warm | None = None

    async def start(self) -> None:
        """Wait until the job process has its context and says it is ready."""
        first, fds = await self.blocking(self.ctrl.recv, HOST_REPLIES)
        close_all(fds)
        if not isinstance(first, Started):
            raise WorkerDied(first.message if isinstance(first, InternalError) else repr(first))
        self.pid = first.pid
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=2**16)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(self._out_fd, "rb", buffering=0))
        self._pump_task = asyncio.create_task(self._pump(reader, transport))
        self._tasks += [self._pump_task, asyncio.create_task(self._watch())]
        reply, fds = await self.recv()
        close_all(fds)
        if not isinstance(reply, Ready):
            raise WorkerDied(f"the worker did not get ready: {reply!r}")
        self.startup = reply.startup.model_dump()
        self.ready = True

    async def _pump(self, reader: asyncio.StreamReader, transport: asyncio.BaseTransport) -> None:
        try:
            await pump(reader, self.output)
        finally:
            transport.close()

    async def _watch(self) -> None:
        try:
            while True:
                msg, fds = await self.blocking(self.ctrl.recv, HOST_REPLIES)
                close_all(fds)
                if isinstance(msg, Exited):
                    self.status = msg.status
                    self.max_rss_bytes = msg.max_rss_bytes
                    # the job's namespace is empty: its processes exited (their CUDA contexts
                    # torn down as they did). The sandbox's own exit, a fork of the zygote
                    # unmapping its imports, is nothing a timing waits for
                    self._gone.set()
        except (ChannelClosed, ProtocolError, OSError):
            pass
        finally:
            self._gone.set()
            self.ctrl.close()

    async def call(self, message: Message, fds: list[int] | None = None) -> tuple[Reply, list[int]]:
        """Send one request and wait for its reply (raises :class:`WorkerDied`)."""
        try:
            await self.blocking(self.chan.send, message, list(fds or []))
        except OSError as exc:
            raise WorkerDied(f"the worker is gone ({exc})") from exc
        return await self.recv()

    async def recv(self) -> tuple[Reply, list[int]]:
        try:
            return await self.blocking(self.chan.recv, REPLIES)
        except (ChannelClosed, OSError) as exc:
            raise WorkerDied("the worker's channel closed") from exc
        except ProtocolError as exc:
            self.kill()
            raise WorkerDied(f"the worker broke the protocol: {exc}") from exc

    def kill(self) -> None:
        """SIGKILL the job process: as pid 1 of its namespace, everything it started dies too.

        Its children get their SIGKILL at the same moment: a dying namespace init kills the
        rest only after its own address space is torn down (the zygote's imports), and the
        job's process (its CUDA context) is its child. Side by side, the two
        teardowns overlap: the job is gone (``server.settle`` of the next timing) sooner.
        """
        if self.pid is not None and self.status is None:
            self.killed = True
            if self.killed_at is None:
                self.killed_at = time.monotonic()
            pidfds = _child_pidfds(self.pid)
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            for pidfd in pidfds:
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                os.close(pidfd)

    async def output_drained(self, timeout: float = 2.0) -> None:
        """Wait (at most ``timeout``) until everything the job's processes printed is read."""
        if self._pump_task is not None:
            await asyncio.wait([self._pump_task], timeout=timeout)

    async def exit_status(self, timeout: float = 10.0) -> int | None:
        """The job process's wait status once it has gone (killing it after ``timeout``)."""
        try:
            await asyncio.wait_for(self._gone.wait(), timeout)
        except asyncio.TimeoutError:
            self.kill()
            await self._gone.wait()
        return self.status

    async def close(self, grace: float = 5.0) -> None:
        """Tell the worker to exit, then make sure it did; release everything it held."""
        try:
            await asyncio.wait_for(self.blocking(self.chan.send, Exit()), 2)
        except (OSError, asyncio.TimeoutError):
            pass
        await self.exit_status(grace)
        self.chan.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _child_pidfds(pid: int) -> list[int]:
    """pidfds of ``pid``'s children. A child is kept only if ``pid`` still lists it once its
    pidfd is open: the pidfd then names that child, not a process that took over the pid of
    one already reaped."""
    opened: dict[int, int] = {}
    for child in children(pid):
        with contextlib.suppress(OSError):
            opened[child] = os.pidfd_open(child)
    still = set(children(pid)) if opened else set()
    kept = []
    for child, pidfd in opened.items():
        if child in still:
            kept.append(pidfd)
        else:
            os.close(pidfd)
    return kept


def close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
