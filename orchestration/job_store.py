"""Jobs in SQLite: request, state, result and timestamps, so ``/job/{id}`` survives a restart.

One connection, guarded by a lock; every call is a short statement, fast enough to run on
the event loop. State changes go through :func:`check_transition`.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from orchestration.job_state import FINAL_STATES, check_transition
from shared.models import CompareResponse, JobState, JobStatusResponse

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id           TEXT PRIMARY KEY,
    kind         TEXT NOT NULL,
    state        TEXT NOT NULL,
    request      TEXT NOT NULL,
    response     TEXT,
    error        TEXT,
    gpu_id       INTEGER,
    created_at   REAL NOT NULL,
    started_at   REAL,
    finished_at  REAL
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state);
CREATE INDEX IF NOT EXISTS jobs_finished ON jobs (finished_at);
"""


class UnknownJob(KeyError):
    pass


@dataclass(frozen=True)
class StateCounts:
    completed: int
    failed: int
    timed_out: int
    queued: int
    running: int
    avg_run_s: float


class JobStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        # A commit is durable against the server's crash, not the host's power loss (which
        # may lose the last moments of jobs): no fsync per state change, ~1 ms each otherwise.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def add(self, job_id: str, kind: str, request_json: str) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO jobs (id, kind, state, request, created_at) VALUES (?, ?, ?, ?, ?)",
                (job_id, kind, JobState.QUEUED.value, request_json, time.time()),
            )

    def _move(self, db: sqlite3.Connection, job_id: str, new: JobState) -> None:
        row = db.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise UnknownJob(job_id)
        check_transition(JobState(row[0]), new)

    def mark_running(self, job_id: str, gpu_id: int | None) -> None:
        with self._tx() as db:
            self._move(db, job_id, JobState.RUNNING)
            db.execute(
                "UPDATE jobs SET state = ?, gpu_id = ?, started_at = ? WHERE id = ?",
                (JobState.RUNNING.value, gpu_id, time.time(), job_id),
            )

    def finish(
        self, job_id: str, state: JobState, response: CompareResponse | None, error: str | None
    ) -> None:
        with self._tx() as db:
            self._move(db, job_id, state)
            db.execute(
                "UPDATE jobs SET state = ?, response = ?, error = ?, finished_at = ? WHERE id = ?",
                (
                    state.value,
                    response.model_dump_json() if response is not None else None,
                    error,
                    time.time(),
                    job_id,
                ),
            )

    def get(self, job_id: str) -> JobStatusResponse | None:
        with self._lock:
            row = self._db.execute(
                "SELECT id, kind, state, response, error, gpu_id, created_at, started_at, "
                "finished_at FROM jobs WHERE id = ?",
                (job_id,),
            ).fetchone()
        if row is None:
            return None
        return JobStatusResponse(
            job_id=row[0], kind=row[1], state=JobState(row[2]),
            result=CompareResponse.model_validate_json(row[3]) if row[3] else None,
            error=row[4], gpu_id=row[5], created_at=row[6], started_at=row[7],
            finished_at=row[8],
        )

    def fail_unfinished(self, reason: str) -> int:
        """Mark every queued or running job failed (they died with the previous server)."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE jobs SET state = ?, error = ?, finished_at = ? "
                "WHERE state IN (?, ?)",
                (JobState.FAILED.value, reason, time.time(), JobState.QUEUED.value,
                 JobState.RUNNING.value),
            )
            return cur.rowcount

    def remove_finished_before(self, cutoff: float) -> list[str]:
        """Delete finished jobs that ended before ``cutoff``; return their ids."""
        finals = [s.value for s in FINAL_STATES]
        marks = ",".join("?" * len(finals))
        with self._tx() as db:
            ids = [
                r[0] for r in db.execute(
                    f"SELECT id FROM jobs WHERE state IN ({marks}) AND finished_at < ?",
                    (*finals, cutoff),
                )
            ]
            db.executemany("DELETE FROM jobs WHERE id = ?", [(i,) for i in ids])
        return ids

    def counts(self, since: float = 0.0) -> StateCounts:
        with self._lock:
            rows = dict(
                self._db.execute(
                    "SELECT state, COUNT(*) FROM jobs WHERE created_at >= ? GROUP BY state",
                    (since,),
                ).fetchall()
            )
            avg = self._db.execute(
                "SELECT AVG(finished_at - started_at) FROM jobs "
                "WHERE started_at IS NOT NULL AND finished_at IS NOT NULL AND created_at >= ?",
                (since,),
            ).fetchone()[0]
        return StateCounts(
            completed=rows.get(JobState.COMPLETED.value, 0),
            failed=rows.get(JobState.FAILED.value, 0),
            timed_out=rows.get(JobState.TIMED_OUT.value, 0),
            queued=rows.get(JobState.QUEUED.value, 0),
            running=rows.get(JobState.RUNNING.value, 0),
            avg_run_s=float(avg or 0.0),
        )
