"""Job events: one log line each, naming the job; plain text or JSON."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from shared import job_events
from shared.log_format import JsonFormatter, configure_logging


@pytest.fixture
def events(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="kernel_eval.job_events")
    return caplog


def as_json(record: logging.LogRecord) -> dict[str, object]:
    return json.loads(JsonFormatter().format(record))


def test_every_event_is_one_line_naming_the_job(events: pytest.LogCaptureFixture) -> None:
    job_events.job_queued("j1", "evaluate", queue_length=3)
    job_events.job_started("j1", "evaluate", gpu=0, queued_s=0.25)
    job_events.job_finished(
        "j1", "evaluate", outcome="success", stage_ms={"compile": 500.0, "total": 2000.04}
    )
    job_events.job_timed_out("j2", "compare", timeout_s=5, stage="profile")
    job_events.job_killed("j3", "validate", reason="server shutdown")
    job_events.job_failed("j4", "evaluate", error="worker lost\nline two")
    messages = [r.getMessage() for r in events.records]
    assert messages[0] == "job j1 queued kind=evaluate queue_length=3"
    assert messages[1] == "job j1 started kind=evaluate gpu=0 device=cuda queued_s=0.250"
    assert messages[2] == (
        "job j1 finished kind=evaluate outcome=success compile_ms=500.0 total_ms=2000.0"
    )
    assert messages[3] == "job j2 timed_out kind=compare timeout_s=5 stage=profile"
    assert messages[4] == 'job j3 killed kind=validate reason="server shutdown"'
    assert messages[5] == 'job j4 failed kind=evaluate error="worker lost\\nline two"'
    assert all("\n" not in m for m in messages)
    assert [r.levelname for r in events.records] == ["INFO"] * 3 + ["WARNING"] * 2 + ["ERROR"]


def test_json_lines_carry_the_fields_as_keys(events: pytest.LogCaptureFixture) -> None:
    job_events.job_started("j1", "compare", gpu=None)
    job_events.job_finished("j1", "compare", outcome="incorrect", stage_ms={"correctness": 5.0})
    started, finished = (as_json(r) for r in events.records)
    assert started["event"] == "started" and started["job_id"] == "j1"
    assert started["device"] == "cpu" and "gpu" not in started  # None fields are left out
    assert finished["outcome"] == "incorrect" and finished["stage_ms"] == {"correctness": 5.0}
    assert finished["level"] == "info" and finished["logger"] == "kernel_eval.job_events"
    assert finished["message"] == (
        "job j1 finished kind=compare outcome=incorrect correctness_ms=5.0"
    )


def test_long_errors_are_shortened_in_the_log(events: pytest.LogCaptureFixture) -> None:
    job_events.job_failed("j1", "evaluate", error="x" * 10_000)
    assert len(str(as_json(events.records[0])["error"])) <= job_events.MAX_ERROR_CHARS + 1


def test_json_formatter_keeps_exceptions_and_protects_its_own_keys() -> None:
    try:
        raise ValueError("bad")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "oops %s", ("now",), None)
        record.exc_info = sys.exc_info()
    record.fields = {"message": "overwritten?", "job_id": "j9"}
    entry = as_json(record)
    assert entry["message"] == "oops now" and entry["job_id"] == "j9"
    assert "ValueError: bad" in str(entry["exc_info"])


def test_configure_logging_json_writes_one_object_per_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        configure_logging("info", "json")
        logging.getLogger("kernel_eval.test").info("hello %s", "world")
        job_events.job_queued("j1", "evaluate")
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    lines = capsys.readouterr().err.strip().splitlines()
    entries = [json.loads(line) for line in lines]
    assert entries[0]["message"] == "hello world"
    assert entries[1]["event"] == "queued" and entries[1]["job_id"] == "j1"
