"""POST /compare/batch on the real app served by uvicorn in a thread, with a fake executor
whose jobs the tests hold and release (a TestClient would buffer the whole stream)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from app import create_app
from shared.models import CompareBatchResult, CompareBatchSummary, JobState, WorkerJob
from shared.settings import Settings
from tests.fake_executor import (
    Behaviour,
    FakeExecutor,
    Gate,
    answer,
    compared,
    compile_error,
    failed,
    raise_error,
    timed_out,
)

QUEUE_LIMIT = 6
REF = "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"


class Scripted:
    """The fake executor's script: a behaviour per custom kernel source, set by each test."""

    def __init__(self) -> None:
        self.behaviours: dict[str, Behaviour] = {}

    def __call__(self, job: WorkerJob) -> Behaviour:
        return self.behaviours.get(job.kernel.source_code) or answer(compared())


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, FakeExecutor, Scripted]]:
    state = tmp_path_factory.mktemp("batch")
    settings = Settings(
        device="cpu", mode="fastapi", max_queued_jobs=QUEUE_LIMIT,
        job_store_path=state / "jobs.db", job_dir=state / "jobs",
        build_cache_dir=state / "cache", ref_cache_dir=state / "refs",
    )
    script = Scripted()
    executor = FakeExecutor(script)
    with serve_in_thread(create_app(settings, executor=executor)) as url:
        yield url, executor, script


@pytest.fixture
def api(served: tuple[str, FakeExecutor, Scripted]) -> Iterator[httpx.Client]:
    url, executor, script = served
    executor.queued = 0
    executor.jobs.clear()
    script.behaviours.clear()
    with httpx.Client(base_url=url, timeout=30) as client:
        yield client


@pytest.fixture
def executor(served: tuple[str, FakeExecutor, Scripted]) -> FakeExecutor:
    return served[1]


@pytest.fixture
def script(served: tuple[str, FakeExecutor, Scripted]) -> Scripted:
    return served[2]


@contextlib.contextmanager
def serve_in_thread(app: FastAPI) -> Iterator[str]:
    """Serve ``app`` on a free localhost port from a thread; yields its URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def kernel(source: str, **extra: object) -> dict[str, object]:
    return {"source_code": source, "kernel_type": "torch", **extra}


def batch(*sources: str, **params: object) -> dict[str, object]:
    return {"ref_kernel": kernel(REF), "custom_kernels": [kernel(s) for s in sources],
            "num_trials": 5, **params}


def read_stream(api: httpx.Client, body: dict[str, object]) -> tuple[
        list[CompareBatchResult], CompareBatchSummary]:
    response = api.post("/compare/batch", json=body)
    assert response.status_code == 200, response.text
    lines = response.text.splitlines()
    results = [CompareBatchResult.model_validate_json(line) for line in lines[:-1]]
    return results, CompareBatchSummary.model_validate_json(lines[-1])


def test_lines_stream_as_jobs_finish_not_in_request_order(
    api: httpx.Client, script: Scripted
) -> None:
    slow = Gate()
    script.behaviours = {"slow": answer(compared(), running=slow),
                         "fast": answer(compared(custom_ms=0.5))}

    with api.stream("POST", "/compare/batch", json=batch("slow", "fast")) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/x-ndjson"
        lines = response.iter_lines()
        first = json.loads(next(lines))
        # The fast candidate's answer arrived while the slow one is still held: streamed.
        assert slow.reached.is_set()
        slow.open()
        second = json.loads(next(lines))
        done = json.loads(next(lines))
        assert list(lines) == []

    assert (first["index"], second["index"]) == (1, 0)
    assert first["response"]["kernel_exec_result"]["runtime"] == 0.5
    assert first["job_id"] != second["job_id"]
    assert done == {"done": True, "count": 2, "summary": done["summary"], "warnings": []}
    assert done["summary"]["success"] == 2 and sum(done["summary"].values()) == 2


def test_each_line_has_the_status_its_job_alone_would_get(
    api: httpx.Client, script: Scripted
) -> None:
    script.behaviours = {
        "ok": answer(compared()),
        "broken": answer(compile_error("SyntaxError: invalid syntax (line 2)")),
        "slow": answer(timed_out()),
        "lost": answer(failed("the worker process was lost")),
        "fault": raise_error(RuntimeError("the pool exploded")),
    }
    sources = ["ok", "broken", "slow", "lost", "fault"]

    results, summary = read_stream(api, batch(*sources))

    by_source = {sources[r.index]: r for r in results}
    assert sorted(r.index for r in results) == [0, 1, 2, 3, 4]
    expected = {
        "ok": (JobState.COMPLETED, 200, "success"),
        "broken": (JobState.COMPLETED, 200, "compile_error"),
        "slow": (JobState.TIMED_OUT, 408, "timeout"),
        "lost": (JobState.FAILED, 500, "failed"),
        "fault": (JobState.FAILED, 500, "failed"),
    }
    for source, (state, status, verdict) in expected.items():
        result = by_source[source]
        assert (result.state, result.status_code, result.verdict) == (state, status, verdict)
        stored = api.get(f"/job/{result.job_id}").json()
        assert stored["kind"] == "compare" and stored["state"] == state.value
    assert "invalid syntax (line 2)" in str(by_source["broken"].response.kernel_exec_result)
    assert by_source["fault"].response.error == "server error: the pool exploded"
    assert summary.count == 5
    assert {k: v for k, v in summary.summary.items() if v} == {
        "success": 1, "compile_error": 1, "timeout": 1, "failed": 2,
    }
    assert set(summary.summary) >= {"incorrect", "runtime_error", "not_run"}


def test_every_candidate_is_queued_in_order_with_the_batch_parameters(
    api: httpx.Client, executor: FakeExecutor
) -> None:
    body = batch("a", "b", "c", num_trials=7, num_correct_trials=2, atol=1e-3,
                 reuse_reference=False, robustness=True)

    results, _ = read_stream(api, body)

    assert [job.kernel.source_code for job in executor.jobs] == ["a", "b", "c"]
    for job in executor.jobs:
        assert job.kind == "compare" and job.ref_kernel is not None
        assert job.ref_kernel.source_code == REF
        assert (job.num_trials, job.num_correct_trials, job.atol) == (7, 2, 1e-3)
        assert job.reuse_reference is False and job.robustness is True
    assert {r.job_id for r in results} == {job.job_id for job in executor.jobs}


def test_a_batch_that_would_pass_the_queue_limit_is_refused_whole(
    api: httpx.Client, executor: FakeExecutor
) -> None:
    executor.queued = 2
    before = api.get("/stats").json()

    refused = api.post("/compare/batch", json=batch("a", "b", "c", "d", "e"))
    too_big = api.post("/compare/batch", json=batch(*"abcdefg"))
    after = api.get("/stats").json()
    fits = api.post("/compare/batch", json=batch("a", "b", "c", "d"))

    assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0
    assert f"MAX_QUEUED_JOBS={QUEUE_LIMIT}" in refused.json()["detail"]
    assert "batch of 5" in refused.json()["detail"]
    assert too_big.status_code == 429
    assert f"at most {QUEUE_LIMIT} at a time" in too_big.json()["detail"]
    count = ("jobs_completed", "jobs_failed", "jobs_queued", "jobs_running")
    assert [after[k] for k in count] == [before[k] for k in count]  # nothing was queued
    assert fits.status_code == 200
    assert [job.kernel.source_code for job in executor.jobs] == ["a", "b", "c", "d"]


def test_a_client_that_disconnects_cancels_no_job(
    api: httpx.Client, script: Scripted, executor: FakeExecutor
) -> None:
    held = Gate()
    script.behaviours = {"held": answer(compared(), running=held)}

    with api.stream("POST", "/compare/batch", json=batch("held", "quick")) as response:
        first = json.loads(next(response.iter_lines()))
    held_job = next(job.job_id for job in executor.jobs if job.kernel.source_code == "held")
    assert first["index"] == 1 and api.get(f"/job/{held_job}").json()["state"] == "running"
    held.open()

    deadline = time.monotonic() + 10
    while (state := api.get(f"/job/{held_job}").json()["state"]) == "running":
        assert time.monotonic() < deadline, "the held job never finished"
        time.sleep(0.01)
    assert state == "completed"


def test_invalid_candidates_are_refused_naming_their_index(
    api: httpx.Client, executor: FakeExecutor
) -> None:
    body = batch("a")
    body["custom_kernels"] = [kernel("a"), {"source_code": "k", "kernel_type": "triton"}]
    no_io = api.post("/compare/batch", json=body)
    empty = api.post("/compare/batch", json={**batch(), "custom_kernels": []})

    assert no_io.status_code == 400
    assert ["body", "custom_kernels", 1, "io"] in [e["loc"] for e in no_io.json()["detail"]]
    assert empty.status_code == 400
    assert empty.json()["detail"][0]["loc"] == ["body", "custom_kernels"]
    assert executor.jobs == []


def test_unknown_fields_are_named_in_the_answers_they_apply_to(api: httpx.Client) -> None:
    body = batch("a", "b", colour="blue")
    body["custom_kernels"][1]["flavour"] = "mint"  # type: ignore[index]

    results, summary = read_stream(api, body)

    warnings = {r.index: r.response.warnings for r in results}
    assert warnings[0] == ["unknown field 'colour' was ignored"]
    assert warnings[1] == ["unknown field 'colour' was ignored",
                           "unknown field 'custom_kernels.1.flavour' was ignored"]
    assert summary.warnings == warnings[1]
