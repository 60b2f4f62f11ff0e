"""The allowed transitions between job states: the one place that defines them."""

from __future__ import annotations

from shared.models import JobState

TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.FAILED}),
    JobState.RUNNING: frozenset({JobState.COMPLETED, JobState.TIMED_OUT, JobState.FAILED}),
    JobState.COMPLETED: frozenset(),
    JobState.TIMED_OUT: frozenset(),
    JobState.FAILED: frozenset(),
}

FINAL_STATES = frozenset(s for s, nxt in TRANSITIONS.items() if not nxt)


class InvalidTransition(RuntimeError):
    """A server bug: a job was moved between states that do not follow each other."""


def check_transition(current: JobState, new: JobState) -> None:
    if new not in TRANSITIONS[current]:
        raise InvalidTransition(f"job cannot go from {current.value} to {new.value}")
