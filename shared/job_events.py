"""One log line per job event, each naming the job: what an operator greps or ships.

    job 5f0c… queued kind=evaluate queue_length=3
    job 5f0c… started kind=evaluate gpu=0 device=cuda queued_s=0.012
    job 5f0c… finished kind=evaluate outcome=success queue_wait_ms=1.2 compile_ms=210.4 …
    job 5f0c… timed_out kind=compare timeout_s=120 stage=profile

With ``LOG_FORMAT=json`` the same fields are keys of the JSON object (``event``, ``job_id``,
``kind``, ``stage_ms`` as an object …; see :mod:`shared.log_format`). The job manager calls one
function per event; nothing here holds state.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from enum import Enum

from shared.log_format import FIELDS_ATTR

log = logging.getLogger("kernel_eval.job_events")

# Error texts can be long tracebacks; the log line keeps their start, the job keeps all of it.
MAX_ERROR_CHARS = 500


class JobEvent(str, Enum):
    QUEUED = "queued"  # accepted, waiting for a device slot
    STARTED = "started"  # a worker on a device slot has the job
    FINISHED = "finished"  # a verdict: the outcome and the stage timings
    TIMED_OUT = "timed_out"  # ran past its timeout; its worker was killed
    KILLED = "killed"  # its worker was killed for another reason (shutdown, cancellation)
    FAILED = "failed"  # the server could not finish it


_LEVELS = {
    JobEvent.QUEUED: logging.INFO,
    JobEvent.STARTED: logging.INFO,
    JobEvent.FINISHED: logging.INFO,
    JobEvent.TIMED_OUT: logging.WARNING,
    JobEvent.KILLED: logging.WARNING,
    JobEvent.FAILED: logging.ERROR,
}


def job_queued(job_id: str, kind: str, *, queue_length: int | None = None) -> None:
    _emit(JobEvent.QUEUED, job_id, kind=kind, queue_length=queue_length)


def job_started(
    job_id: str, kind: str, *, gpu: int | None, queued_s: float | None = None
) -> None:
    """``gpu`` is the physical GPU id, ``None`` in CPU mode."""
    _emit(JobEvent.STARTED, job_id, kind=kind, gpu=gpu, device="cpu" if gpu is None else "cuda",
          queued_s=queued_s)


def job_finished(
    job_id: str, kind: str, *, outcome: str, stage_ms: Mapping[str, float],
    gpu: int | None = None,
) -> None:
    """``outcome`` is the kernel's verdict (``success``, ``compile_error``, …); ``stage_ms`` is
    the response's ``stage_timings``: stage name (``queue_wait``, ``compile``, …, ``total``) to
    milliseconds."""
    _emit(JobEvent.FINISHED, job_id, kind=kind, outcome=outcome, gpu=gpu,
          stage_ms=dict(stage_ms))


def job_timed_out(
    job_id: str, kind: str, *, timeout_s: float, stage: str | None = None
) -> None:
    _emit(JobEvent.TIMED_OUT, job_id, kind=kind, timeout_s=timeout_s, stage=stage)


def job_killed(job_id: str, kind: str, *, reason: str) -> None:
    _emit(JobEvent.KILLED, job_id, kind=kind, reason=reason)


def job_failed(job_id: str, kind: str, *, error: str) -> None:
    _emit(JobEvent.FAILED, job_id, kind=kind, error=_shorten(error))


def _emit(event: JobEvent, job_id: str, **fields: object) -> None:
    level = _LEVELS[event]
    if not log.isEnabledFor(level):
        return
    present = {k: v for k, v in fields.items() if v is not None}
    structured = {"event": event.value, "job_id": job_id, **present}
    log.log(level, "job %s %s%s", job_id, event.value, _render(present),
            extra={FIELDS_ATTR: structured})


def _render(fields: Mapping[str, object]) -> str:
    parts: list[str] = []
    for key, value in fields.items():
        if isinstance(value, Mapping):  # stage timings: compile_ms=210.0 …
            parts += [f"{k}_ms={v:.1f}" for k, v in value.items()]
        else:
            parts.append(f"{key}={_value(value)}")
    return "".join(" " + p for p in parts)


def _value(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    text = str(value)
    if not text or any(c.isspace() or c in '"=' for c in text):
        return json.dumps(text, ensure_ascii=False)
    return text


def _shorten(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + "…"
