"""The SQLite job store and the job state machine."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestration.job_state import InvalidTransition, check_transition
from orchestration.job_store import JobStore
from shared.models import CompareResponse, JobState


def test_lifecycle_is_persisted(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.db")
    store.add("j1", "evaluate", "{}")
    assert store.get("j1").state == JobState.QUEUED
    store.mark_running("j1", gpu_id=3)
    store.finish("j1", JobState.COMPLETED, CompareResponse(job_id="j1", status="success"), None)
    store.close()
    reopened = JobStore(tmp_path / "jobs.db")
    status = reopened.get("j1")
    assert status.state == JobState.COMPLETED and status.gpu_id == 3
    assert status.result.job_id == "j1"
    assert status.created_at <= status.started_at <= status.finished_at


def test_illegal_transitions_are_refused(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.db")
    store.add("j", "evaluate", "{}")
    with pytest.raises(InvalidTransition):
        store.finish("j", JobState.COMPLETED, None, None)  # never ran
    store.mark_running("j", None)
    store.finish("j", JobState.TIMED_OUT, None, "late")
    with pytest.raises(InvalidTransition):
        store.mark_running("j", None)
    check_transition(JobState.QUEUED, JobState.FAILED)


def test_unfinished_jobs_fail_at_startup_and_cleanup(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.db")
    for job_id in ("queued", "running", "done"):
        store.add(job_id, "evaluate", "{}")
    store.mark_running("running", None)
    store.mark_running("done", None)
    store.finish("done", JobState.COMPLETED, None, None)
    assert store.fail_unfinished("restart") == 2
    assert store.get("queued").state == JobState.FAILED and store.get("queued").error == "restart"
    counts = store.counts()
    assert (counts.failed, counts.completed, counts.running) == (2, 1, 0)
    assert store.remove_finished_before(time.time() - 3600) == []
    assert sorted(store.remove_finished_before(time.time() + 1)) == ["done", "queued", "running"]
    assert store.get("done") is None
