"""A batch of comparisons: one reference, many candidates, answered as each one finishes.

Used by ``POST /compare/batch`` and the MCP ``compare_batch`` tool. Every candidate is an
ordinary compare job (stored, visible at ``/job/{id}``). All are queued in one go, before
anything is awaited, so the executor takes them in their order. They share one reference: its
figure is taken once (by the first candidate to need it) and every candidate's speedup is
against it, and a judge with the reference loaded serves candidate after candidate
(:mod:`orchestration.references`), even with ``reuse_reference: false`` (which then keeps the
figure to this batch). The jobs run in tasks of their own
(see :meth:`JobManager.start_compare`): a caller that stops listening cancels none of them.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass

from orchestration import verdicts
from orchestration.job_manager import JobManager, JobOutcome
from orchestration.job_state import FINAL_STATES
from shared.models import CompareBatchRequest, JobState


@dataclass(frozen=True)
class Finished:
    """One candidate's job, finished."""

    index: int  # the candidate's position in the request
    job_id: str
    outcome: JobOutcome


class Batch:
    """The jobs of one batch request, queued on construction (:meth:`start`)."""

    def __init__(self, manager: JobManager, jobs: list[tuple[str, Awaitable[JobOutcome]]]) -> None:
        self._manager = manager
        self.job_ids = [job_id for job_id, _ in jobs]
        self._finished: asyncio.Queue[int] = asyncio.Queue()
        self._futures: list[asyncio.Future[JobOutcome]] = []
        for index, (_, outcome) in enumerate(jobs):
            future = asyncio.ensure_future(outcome)
            future.add_done_callback(functools.partial(self._done, index))
            self._futures.append(future)

    @classmethod
    def start(cls, manager: JobManager, request: CompareBatchRequest) -> Batch:
        """Queue a compare job for every candidate of ``request``, in order.

        Raises :class:`~orchestration.job_manager.ShuttingDown` (before queueing any) when the
        manager takes no new jobs.
        """
        batch_id = uuid.uuid4().hex
        return cls(manager, [manager.start_compare(r, batch_id=batch_id)
                             for r in request.requests()])

    def __len__(self) -> int:
        return len(self.job_ids)

    async def as_finished(self) -> AsyncIterator[Finished]:
        """Each job as it finishes, in the order they finish. Iterate once."""
        for _ in range(len(self._futures)):
            index = await self._finished.get()
            yield Finished(index, self.job_ids[index], self._outcome(index))

    def _done(self, index: int, future: asyncio.Future[JobOutcome]) -> None:
        self._finished.put_nowait(index)

    def _outcome(self, index: int) -> JobOutcome:
        future = self._futures[index]
        if not future.cancelled() and future.exception() is None:
            return future.result()
        # The job's task was cancelled (the server is shutting down) or broke: what the job
        # store kept is the answer.
        job_id = self.job_ids[index]
        status = self._manager.job_status(job_id)
        if status is not None and status.state in FINAL_STATES and status.result is not None:
            return JobOutcome(status.state, status.result)
        reason = (status.error if status is not None else None) or (
            "the server shut down before this job finished" if future.cancelled()
            else f"server error: {future.exception()}"
        )
        return JobOutcome(JobState.FAILED,
                          verdicts.response(job_id, "compare", verdicts.server_fault(reason)))
