"""The fork servers: one zygote per GPU (and one for the CPU, one for the build stage).

A zygote (:mod:`worker_host.zygote`) imports torch, Triton, CuPy and the harness once and
then forks every job process of its device, already sandboxed. :class:`Zygotes` starts each
one on first use (one start at a time per device, shared by everyone who waits), reports the
isolation it found, and stops them all when the server closes. The environment a zygote
gets is the one every worker it forks inherits: its device, its hardware work queues and
what its spares warm, and the paths the sandbox hides.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from orchestration.worker import BlockingCalls, close_all
from orchestration.worker_kinds import ONE_QUEUE, QUEUES_ENV, Warm
from shared.channel import Channel, ChannelClosed, ProtocolError
from shared.protocol import (
    BUILD_PROCESS_ENV,
    HOST_REPLIES,
    WARM_CUBLAS,
    InternalError,
    Spawn,
    Spawned,
    ZygoteReady,
)
from shared.settings import Settings

log = logging.getLogger("kernel_eval.workers")

PROJECT_ROOT = Path(__file__).resolve().parent.parent
ZYGOTE_START_TIMEOUT_S = 300


class ZygoteError(RuntimeError):
    """A zygote could not be started or stopped answering."""


@dataclass(frozen=True)
class PoolKey:
    """Which zygote a worker comes from: a GPU, the CPU, or the CPU build stage."""

    gpu_id: int | None
    build: bool = False

    @property
    def name(self) -> str:
        if self.build:
            return "build"
        return "cpu" if self.gpu_id is None else f"gpu{self.gpu_id}"


@dataclass
class Zygote:
    """One fork server process and the channel to it."""

    key: str
    proc: asyncio.subprocess.Process
    chan: Channel
    isolation: str
    detail: str
    blocking: BlockingCalls
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def spawn(self, request: Spawn) -> tuple[Channel, Channel, int, int]:
        """Fork a worker: (control channel, job channel, output pipe, outer process's pid)."""
        async with self.lock:
            await self.blocking(self.chan.send, request)
            reply, fds = await self.blocking(self.chan.recv, HOST_REPLIES)
        if not isinstance(reply, Spawned) or len(fds) != 3:
            close_all(fds)
            raise ZygoteError(f"the zygote {self.key} did not spawn a worker: {reply}")
        return Channel.from_fd(fds[0]), Channel.from_fd(fds[1]), fds[2], reply.outer_pid


class Zygotes:
    """The zygotes of this host's devices, started on first use (see the module docstring).
    ``warm(key)``: what the spares of ``key`` warm by default (None: no CUDA there)."""

    def __init__(self, settings: Settings, device: str, extra_env: dict[str, str],
                 work_root: Path, blocking: BlockingCalls,
                 warm: Callable[[PoolKey], Warm | None]) -> None:
        self.settings, self.device, self.extra_env = settings, device, extra_env
        self.work_root, self.blocking, self.warm = work_root, blocking, warm
        self._running: dict[PoolKey, Zygote] = {}
        self._starting: dict[PoolKey, asyncio.Task[Zygote]] = {}
        # the sandbox the last device zygote found (the build stage's is its own)
        self.isolation = "none"
        self.isolation_detail = "no worker has been started yet"

    def env(self, key: PoolKey) -> dict[str, str]:
        """The environment of ``key``'s zygote, which its workers inherit."""
        env = dict(os.environ)
        env.update(self.extra_env)
        env["KES_DEVICE"] = "cpu" if key.build or self.device == "cpu" else "cuda"
        env[BUILD_PROCESS_ENV] = "1" if key.build else "0"
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if p)
        env["CUDA_VISIBLE_DEVICES"] = "" if key.gpu_id is None else str(key.gpu_id)
        if env["KES_DEVICE"] == "cuda":
            env.setdefault(QUEUES_ENV, ONE_QUEUE)  # an operator's own setting stands
            env.update((self.warm(key) or Warm(WARM_CUBLAS)).env())
        env["CUPY_CACHE_DIR"] = str(self.settings.cupy_cache_dir)
        if env["KES_DEVICE"] == "cpu" and not key.build:
            env["TRITON_INTERPRET"] = "1"
            # A comparison's two processes share the host's cores: OpenMP threads that spin
            # after each parallel region (libgomp's default) would starve the judge's clock of
            # the core it needs to take the kernel's outputs, and read as the kernel's time.
            env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        env["KES_ZYGOTE_CONFIG"] = json.dumps({
            "sandbox": self.settings.sandbox, "uid": self.settings.sandbox_uid,
            "probe_dir": str(self.work_root / f"probe-{key.name}"),
            "hidden": [str(p) for p in self.hidden_paths()],
            "max_tasks": self.settings.worker_max_tasks,
        })
        return env

    def hidden_paths(self) -> list[Path]:
        """Directories a worker must not see: other jobs, the job store, server state."""
        paths = [self.settings.job_dir, self.settings.job_store_path.resolve().parent,
                 self.settings.ref_cache_dir, self.settings.jit_cache_dir]
        return [p.resolve() for p in paths]

    async def get(self, key: PoolKey) -> Zygote:
        """``key``'s zygote, started now if it is not running (one start shared by all)."""
        if key in self._running and self._running[key].proc.returncode is None:
            return self._running[key]
        task = self._starting.get(key)
        if task is None or task.done():
            task = asyncio.create_task(self._start(key))
            self._starting[key] = task
        zygote = await asyncio.shield(task)
        self._running[key] = zygote
        return zygote

    async def _start(self, key: PoolKey) -> Zygote:
        self.work_root.mkdir(parents=True, exist_ok=True)
        parent, child = socket.socketpair()
        proc = await asyncio.create_subprocess_exec(
            self.settings.python_executable, "-m", "worker_host.zygote", str(child.fileno()),
            pass_fds=[child.fileno()], env=self.env(key), cwd=str(self.work_root),
            start_new_session=True,
        )
        child.close()
        chan = Channel(parent)
        try:
            return await self._greet(key, proc, chan)
        except BaseException:  # a zygote that did not start (or a start cancelled): gone, reaped
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            chan.close()
            raise

    async def _greet(self, key: PoolKey, proc: asyncio.subprocess.Process,
                     chan: Channel) -> Zygote:
        try:
            hello, fds = await asyncio.wait_for(self.blocking(chan.recv, HOST_REPLIES),
                                                ZYGOTE_START_TIMEOUT_S)
        except (asyncio.TimeoutError, ChannelClosed, ProtocolError) as exc:
            raise ZygoteError(f"the {key.name} zygote did not start: {exc!r}") from exc
        close_all(fds)
        if not isinstance(hello, ZygoteReady):
            why = hello.message if isinstance(hello, InternalError) else repr(hello)
            raise ZygoteError(f"the {key.name} zygote failed: {why}")
        isolation, detail = hello.isolation, hello.detail
        limit = hello.task_limit
        detail = "; ".join(d for d in (detail, (
            f"each worker holds at most {limit} processes and threads" if limit else
            "no per-worker task limit (WORKER_MAX_TASKS=0, or no pids cgroup to use)")) if d)
        if not key.build:
            self.isolation, self.isolation_detail = isolation, detail
        if isolation == "none" and self.settings.sandbox != "off":
            log.warning("workers run WITHOUT isolation (%s zygote): %s", key.name, detail)
            if self.settings.sandbox == "on":
                raise ZygoteError(f"SANDBOX=on but the sandbox does not work here: {detail}")
        else:
            log.info("%s zygote ready; worker isolation: %s", key.name, isolation)
        return Zygote(key.name, proc, chan, isolation, detail, self.blocking)

    async def close(self) -> None:
        """Every zygote stopped (killed after 5 s), every start under way cancelled; each
        process reaped."""
        for zygote in self._running.values():
            zygote.chan.close()
            try:
                await asyncio.wait_for(zygote.proc.wait(), 5)
            except asyncio.TimeoutError:
                zygote.proc.kill()
                await zygote.proc.wait()
        starting = [t for t in self._starting.values() if not t.done()]
        for task in starting:
            task.cancel()
        await asyncio.gather(*starting, return_exceptions=True)  # each reaps its process
