"""Single-use worker processes, with one pre-started spare per device slot.

Starting Python, importing torch and creating a CUDA context takes seconds; a job should not
wait for that. So each slot keeps a spare worker that has done it already and now waits for
exactly one job path on its stdin. When a job takes the spare, the slot's next spare is
started at once, so that back-to-back jobs do not wait for an import either.

Every worker runs in its own process group (``start_new_session``) so that a timeout kills
it together with anything it spawned (nvcc, ninja, a fork bomb). Its stdout and stderr are
streamed into the server log, tagged with the job id, up to a line limit per job.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

from orchestration.gpu_pool import Slot
from shared.settings import Settings

log = logging.getLogger("kernel_eval.worker")

PROJECT_ROOT = Path(__file__).resolve().parent.parent
WORKER_SCRIPT = PROJECT_ROOT / "subprocess_worker.py"
MAX_LOG_LINES = 2000


class WorkerProcess:
    """One worker child process, started in spare mode."""

    def __init__(self, proc: asyncio.subprocess.Process, slot: Slot) -> None:
        self.proc = proc
        self.slot = slot
        self.label = f"spare-{slot.index}"
        self._lines = 0
        self._readers = [
            asyncio.create_task(self._pump(proc.stdout, logging.INFO)),
            asyncio.create_task(self._pump(proc.stderr, logging.WARNING)),
        ]

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    async def _pump(self, stream: asyncio.StreamReader | None, level: int) -> None:
        if stream is None:
            return
        while line := await stream.readline():
            self._lines += 1
            if self._lines <= MAX_LOG_LINES:
                log.log(level, "[%s] %s", self.label, line.decode(errors="replace").rstrip())
            elif self._lines == MAX_LOG_LINES + 1:
                log.warning("[%s] more output than %d lines; not logged", self.label, MAX_LOG_LINES)

    async def assign(self, request_path: Path, label: str) -> None:
        """Hand this worker its one job."""
        self.label = label
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{request_path}\n".encode())
        await self.proc.stdin.drain()
        self.proc.stdin.close()

    async def wait(self) -> int:
        code = await self.proc.wait()
        await asyncio.gather(*self._readers, return_exceptions=True)
        return code

    async def kill(self) -> None:
        """Kill the worker's whole process group and wait until the worker is gone."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        await self.wait()

    async def retire(self) -> None:
        """Let an unused spare go: closing its stdin tells it no job is coming."""
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.wait(), timeout=5)
        except asyncio.TimeoutError:
            await self.kill()


class WorkerPool:
    def __init__(self, settings: Settings, device: str) -> None:
        self.settings = settings
        self.device = device
        self._spares: dict[int, WorkerProcess] = {}

    def environment(self, slot: Slot) -> dict[str, str]:
        env = dict(os.environ)
        env["KES_DEVICE"] = self.device
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if p
        )
        env["CUDA_VISIBLE_DEVICES"] = "" if slot.gpu_id is None else str(slot.gpu_id)
        env["CUPY_CACHE_DIR"] = str(self.settings.cupy_cache_dir)
        env["TORCH_EXTENSIONS_DIR"] = str(self.settings.build_cache_dir / "torch_extensions")
        if self.device == "cpu":
            env["TRITON_INTERPRET"] = "1"
        return env

    async def spawn(self, slot: Slot) -> WorkerProcess:
        proc = await asyncio.create_subprocess_exec(
            self.settings.python_executable, str(WORKER_SCRIPT), "--spare",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.environment(slot),
            cwd=str(PROJECT_ROOT),
            start_new_session=True,
        )
        return WorkerProcess(proc, slot)

    async def take(self, slot: Slot) -> WorkerProcess:
        """The slot's spare if it is alive, else a freshly started worker."""
        spare = self._spares.pop(slot.index, None)
        if spare is not None and spare.alive:
            return spare
        if spare is not None:
            await spare.wait()
        return await self.spawn(slot)

    async def replenish(self, slot: Slot) -> None:
        """Start the slot's next spare unless it has one."""
        if self.settings.spare_workers and slot.index not in self._spares:
            self._spares[slot.index] = await self.spawn(slot)

    async def close(self) -> None:
        spares, self._spares = list(self._spares.values()), {}
        await asyncio.gather(*(s.retire() for s in spares), return_exceptions=True)
