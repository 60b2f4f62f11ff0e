"""A job's worker output, kept within a fixed size: the first bytes, the last bytes, a count.

A kernel may print without limit (a debug loop, a 500 KB line, 100 MB in all). The worker must
never block on a full pipe, and the server must not grow with what it prints. So the server
reads the worker's stdout and stderr in chunks until EOF (:func:`pump`), never by lines, and
keeps only the first ``head_bytes`` and the last ``tail_bytes`` of it (:class:`OutputCapture`);
what lies between is counted and shown as one marker line.

The kept text is what ``GET /job/{id}/log`` serves (from :data:`WORKER_LOG_NAME` in the job's
directory) and what a failed job's result quotes (:meth:`OutputCapture.tail`).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from shared.job_files import write_atomic

DEFAULT_HEAD_BYTES = 512 * 1024
DEFAULT_TAIL_BYTES = 512 * 1024
READ_CHUNK_BYTES = 64 * 1024
# The file in a job's directory that holds its kept output.
WORKER_LOG_NAME = "worker.log"
# Job ids name directories: anything else (a path, "..") is never looked up.
_JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")


class OutputCapture:
    """The first ``head_bytes`` and the last ``tail_bytes`` of a byte stream, and its length.

    Memory stays under ``head_bytes + 2 * tail_bytes`` whatever is fed (the tail buffer is
    trimmed once it holds twice its share, so trimming is amortised over many feeds).
    """

    def __init__(
        self, head_bytes: int = DEFAULT_HEAD_BYTES, tail_bytes: int = DEFAULT_TAIL_BYTES
    ) -> None:
        if head_bytes < 0 or tail_bytes < 0:
            raise ValueError("head_bytes and tail_bytes must not be negative")
        self.head_bytes = head_bytes
        self.tail_bytes = tail_bytes
        self._head = bytearray()
        self._tail = bytearray()
        self._total = 0

    def feed(self, data: bytes) -> None:
        self._total += len(data)
        room = self.head_bytes - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data or self.tail_bytes == 0:
            return
        self._tail += data
        if len(self._tail) > 2 * self.tail_bytes:
            del self._tail[: len(self._tail) - self.tail_bytes]

    @property
    def total_bytes(self) -> int:
        """Every byte fed so far."""
        return self._total

    @property
    def kept_bytes(self) -> int:
        return len(self._head) + min(len(self._tail), self.tail_bytes)

    @property
    def omitted_bytes(self) -> int:
        """Bytes fed but not kept: those between the head and the tail."""
        return self._total - self.kept_bytes

    def text(self) -> str:
        """The kept output, with a marker line where bytes were left out."""
        head = self._head.decode(errors="replace")
        tail = self._kept_tail().decode(errors="replace")
        if self.omitted_bytes == 0:
            return head + tail
        newline = "" if head.endswith("\n") or not head else "\n"
        return f"{head}{newline}[... {self.omitted_bytes} bytes omitted ...]\n{tail}"

    def tail(self, n_bytes: int) -> str:
        """The last ``n_bytes`` of the output (as far as kept), e.g. for a failed job's result."""
        if n_bytes <= 0:
            return ""
        tail = self._kept_tail()
        if len(tail) >= n_bytes or self.omitted_bytes > 0:
            return bytes(tail[-n_bytes:]).decode(errors="replace")
        # Head and tail still join up: nothing was left out between them.
        return bytes((self._head + tail)[-n_bytes:]).decode(errors="replace")

    def take(self) -> OutputCapture:
        """What was captured so far, as a capture of its own; this one starts empty again (a
        judge's output belongs to the job it served at the time)."""
        taken = OutputCapture(self.head_bytes, self.tail_bytes)
        taken._head, taken._tail, taken._total = self._head, self._tail, self._total
        self._head, self._tail, self._total = bytearray(), bytearray(), 0
        return taken

    def save(self, path: Path) -> None:
        """Write :meth:`text` to ``path`` atomically (a reader sees no half-written log)."""
        write_atomic(path, self.text())

    def _kept_tail(self) -> bytearray:
        return self._tail[-self.tail_bytes :] if self.tail_bytes else bytearray()


async def pump(
    stream: asyncio.StreamReader, capture: OutputCapture, chunk: int = READ_CHUNK_BYTES
) -> None:
    """Read ``stream`` into ``capture`` in chunks until EOF.

    It keeps reading after the capture is full (the rest is only counted), so the process
    writing to the pipe is never blocked by its own output. Reads are by size, not by line, so
    no line is too long.
    """
    while data := await stream.read(chunk):
        capture.feed(data)


def worker_log_path(job_dir: Path, job_id: str) -> Path:
    """Where a job's kept output is saved: ``<job_dir>/<job_id>/worker.log``."""
    if not _JOB_ID.fullmatch(job_id):
        raise ValueError(f"not a job id: {job_id!r}")
    return job_dir / job_id / WORKER_LOG_NAME


def read_worker_log(job_dir: Path, job_id: str) -> str | None:
    """A job's kept output, or None when there is none (or ``job_id`` is not a job id)."""
    try:
        return worker_log_path(job_dir, job_id).read_text(encoding="utf-8", errors="replace")
    except (ValueError, FileNotFoundError):
        return None
