"""The bounded queue: a new job is refused while ``MAX_QUEUED_JOBS`` jobs wait for a device.

REST answers a refusal with ``429`` and a ``Retry-After`` header (app.py), MCP with an error
result (mcp_server.py); both take the decision and its wording from :meth:`Admission.check`.
Jobs already running do not count: only those still waiting for a device slot.
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

    def message(self) -> str:
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

    def check(self, queue: Queue, kind: str) -> QueueFull | None:
        """None if a job of ``kind`` may be queued now, else why not."""
        queued = queue.queue_length()
        if queued < self.limit:
            return None
        if self._metrics is not None:
            self._metrics.job_rejected(kind)
        return QueueFull(queued=queued, limit=self.limit)
