"""The bounded queue: a new job is refused while ``MAX_QUEUED_JOBS`` jobs wait for a device.

REST answers a refusal with ``429`` and a ``Retry-After`` header (app.py), MCP with an error
result (mcp_tools/tools.py); both take the decision and its wording from
:meth:`Admission.check`.
Jobs already running do not count: only those still waiting for a device slot. A batch of
``count`` jobs is admitted whole or not at all: refused when it would take the queue past its
limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from orchestration.metrics import Metrics

# A hint, not a promise: a queue of short jobs drains in seconds, and clients back off anyway.
RETRY_AFTER_S = 5


class Queue(Protocol):
    def queue_length(self) -> int:
        """Jobs accepted but still waiting for a device slot."""
        ...


@dataclass(frozen=True)
class QueueFull:
    """Why a submission was refused."""

    queued: int
    limit: int
    retry_after_s: int = RETRY_AFTER_S
    count: int = 1  # jobs asked for at once (a batch)

    def message(self) -> str:
        if self.count > self.limit:
            return (
                f"the server's queue is full for a batch of {self.count} jobs: it holds at "
                f"most {self.limit} waiting jobs (MAX_QUEUED_JOBS={self.limit}); send at most "
                f"{self.limit} at a time"
            )
        if self.count > 1:
            return (
                f"the server's queue is full: {self.queued} jobs are waiting for a device and "
                f"a batch of {self.count} would pass the limit MAX_QUEUED_JOBS={self.limit}; "
                f"retry in {self.retry_after_s} s"
            )
        return (
            f"the server's queue is full: {self.queued} jobs are waiting for a device "
            f"(limit MAX_QUEUED_JOBS={self.limit}); retry in {self.retry_after_s} s"
        )


class Admission:
    """Decides whether one more job may be queued; counts refusals in ``metrics``."""

    def __init__(self, limit: int, metrics: Metrics | None = None) -> None:
        if limit < 1:
            raise ValueError("the queue limit must be at least 1")
        self.limit = limit
        self._metrics = metrics

    def check(self, queue: Queue, kind: str, count: int = 1) -> QueueFull | None:
        """None if ``count`` jobs of ``kind`` may be queued now, else why not."""
        queued = queue.queue_length()
        if queued + count <= self.limit:
            return None
        if self._metrics is not None:
            self._metrics.job_rejected(kind)
        return QueueFull(queued=queued, limit=self.limit, count=count)
