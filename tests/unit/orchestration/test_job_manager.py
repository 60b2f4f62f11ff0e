"""The JobManager (job store + state machine) beside a fake executor with scripted answers."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from orchestration.device_probe import DeviceInfo
from orchestration.job_manager import JobManager, JobOutcome, ShuttingDown, http_status
from orchestration.job_store import JobStore
from shared.models import (
    CompareRequest,
    CompareResponse,
    EvaluationRequest,
    JobState,
    JobStatusResponse,
    KernelCode,
    KernelExecResult,
    KernelType,
    Outcome,
    WorkerResult,
)
from shared.settings import Settings
from tests.fake_executor import (
    Behaviour,
    FakeExecutor,
    Gate,
    answer,
    compared,
    compile_error,
    failed,
    hang,
    raise_error,
    timed_out,
)

pytestmark = pytest.mark.anyio

REF = KernelCode(
    source_code="class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2",
    kernel_type=KernelType.TORCH,
)
CUSTOM = KernelCode(
    source_code="class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x + x",
    kernel_type=KernelType.TORCH,
)
SHUTDOWN_REASON = "the server shut down before this job finished"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def store(tmp_path: Path) -> JobStore:
    return JobStore(tmp_path / "jobs.db")


@pytest.fixture
async def make_manager(
    tmp_path: Path, store: JobStore
) -> AsyncIterator[Callable[[FakeExecutor], JobManager]]:
    settings = Settings(
        device="cpu", job_store_path=tmp_path / "jobs.db", job_dir=tmp_path / "jobs",
        build_cache_dir=tmp_path / "cache", ref_cache_dir=tmp_path / "refs",
    )
    made: list[JobManager] = []

    def make(executor: FakeExecutor) -> JobManager:
        manager = JobManager(settings, DeviceInfo(device="cpu"), store, executor=executor)
        made.append(manager)
        return manager

    yield make
    for manager in made:
        await manager.close(grace_s=0)
    store.close()


def executor_of(behaviour: Behaviour) -> FakeExecutor:
    return FakeExecutor(lambda job: behaviour)


def compare_request(**params: object) -> CompareRequest:
    return CompareRequest(ref_kernel=REF, custom_kernel=CUSTOM, **params)  # type: ignore[arg-type]


def stored(store: JobStore, job_id: str) -> JobStatusResponse:
    status = store.get(job_id)
    assert status is not None, f"job {job_id} is not in the store"
    return status


async def until(predicate: Callable[[], bool], what: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.002)


# ---- the state machine ------------------------------------------------------------------------


async def test_a_job_is_stored_queued_then_running_then_completed(
    make_manager: Callable[[FakeExecutor], JobManager], store: JobStore
) -> None:
    waiting, running = Gate(), Gate()
    manager = make_manager(executor_of(answer(compared(), queued=waiting, running=running)))
    await manager.start()

    job_id, outcome = manager.start_compare(compare_request())
    assert stored(store, job_id).state is JobState.QUEUED

    await until(waiting.reached.is_set, "the job waits for a device")
    held = stored(store, job_id)
    assert held.state is JobState.QUEUED and held.started_at is None  # waiting is not running

    waiting.open()
    await until(running.reached.is_set, "the job runs")
    status = stored(store, job_id)
    assert status.state is JobState.RUNNING
    assert status.started_at is not None and status.finished_at is None and status.result is None

    running.open()
    result = await outcome
    final = stored(store, job_id)
    assert result.state is JobState.COMPLETED and final.state is JobState.COMPLETED
    assert final.finished_at is not None and final.finished_at >= status.started_at
    assert final.result is not None and final.result.job_id == job_id
    assert final.result.kernel_exec_result == result.response.kernel_exec_result


@pytest.mark.parametrize(
    ("result", "state", "status", "answer_status", "outcome"),
    [
        (compared(), JobState.COMPLETED, 200, "success", Outcome.SUCCESS),
        # A kernel that does not compile is a verdict: the job completed.
        (compile_error(), JobState.COMPLETED, 200, "success", Outcome.COMPILE_ERROR),
        (timed_out(), JobState.TIMED_OUT, 408, "error", Outcome.TIMEOUT),
        (failed(), JobState.FAILED, 500, "error", None),
    ],
    ids=["success", "compile_error", "timed_out", "failed"],
)
async def test_each_final_state_is_stored_and_gives_its_http_status(
    make_manager: Callable[[FakeExecutor], JobManager],
    store: JobStore,
    result: WorkerResult,
    state: JobState,
    status: int,
    answer_status: str,
    outcome: Outcome | None,
) -> None:
    manager = make_manager(executor_of(answer(result)))
    await manager.start()

    job_id, pending = manager.start_compare(compare_request())
    done = await pending

    assert done.state is state and done.http_status == status == http_status(state)
    assert done.response.job_id == job_id and done.response.status == answer_status
    assert done.response.error == result.error
    verdict = done.response.kernel_exec_result
    assert (verdict.outcome if verdict is not None else None) is outcome
    kept = stored(store, job_id)
    assert kept.state is state and kept.error == result.error
    assert kept.result is not None and kept.result.status == answer_status


@pytest.mark.parametrize(
    ("state", "status"),
    [(JobState.COMPLETED, 200), (JobState.TIMED_OUT, 408), (JobState.FAILED, 500)],
)
def test_the_http_status_follows_from_the_state_alone(state: JobState, status: int) -> None:
    # A completed job whose answer says "error" (its reference failed) is still a 200.
    response = CompareResponse(job_id="j", status="error", error="the reference failed")
    assert JobOutcome(state, response).http_status == status


async def test_an_executor_exception_fails_the_job_as_a_server_error(
    make_manager: Callable[[FakeExecutor], JobManager], store: JobStore
) -> None:
    manager = make_manager(executor_of(raise_error(RuntimeError("the pool exploded"))))
    await manager.start()

    job_id, pending = manager.start_evaluate(EvaluationRequest(kernel=CUSTOM))
    done = await pending

    assert done.state is JobState.FAILED and done.http_status == 500
    assert done.response.error == "server error: the pool exploded"
    kept = stored(store, job_id)
    assert kept.state is JobState.FAILED and kept.error == "server error: the pool exploded"


# ---- the answer ----------------------------------------------------------------------------------


async def test_a_comparison_answer_has_stage_timings_and_the_reference_runtime(
    make_manager: Callable[[FakeExecutor], JobManager], store: JobStore
) -> None:
    manager = make_manager(executor_of(answer(compared(custom_ms=1.0, ref_ms=2.5))))
    await manager.start()

    job_id, pending = manager.start_compare(compare_request())
    response = (await pending).response

    assert response.ref_runtime is not None and response.ref_runtime.mean == 2.5
    assert response.ref_exec_result is not None and response.ref_exec_result.runtime == 2.5
    assert response.kernel_exec_result is not None and response.kernel_exec_result.runtime == 1.0
    # The executor's stages, and the manager's own hand-back (storing the result).
    assert {"queue_wait", "compile", "timing", "total"} <= set(response.stage_timings)
    assert response.stage_timings["compile"] == 5.0
    assert response.stage_timings["handback"] >= 0
    kept = stored(store, job_id).result
    assert kept is not None and kept.ref_runtime == response.ref_runtime


async def test_an_evaluation_answer_has_no_reference_fields(
    make_manager: Callable[[FakeExecutor], JobManager],
) -> None:
    manager = make_manager(executor_of(answer(compared())))  # a reference result, ignored
    await manager.start()

    response = (await manager.evaluate(EvaluationRequest(kernel=CUSTOM))).response

    assert response.ref_runtime is None and response.ref_exec_result is None
    assert response.kernel_exec_result is not None and response.kernel_exec_result.runtime == 1.0


@pytest.mark.parametrize("harness_error", [None, "the reference kernel failed"])
async def test_a_failed_reference_gives_an_error_answer_with_its_message(
    make_manager: Callable[[FakeExecutor], JobManager], harness_error: str | None
) -> None:
    detail = "NameError: name 'torh' is not defined"
    ref = KernelExecResult(outcome=Outcome.COMPILE_ERROR, compilation_error=detail)
    manager = make_manager(
        executor_of(answer(WorkerResult(ref_exec_result=ref, error=harness_error)))
    )
    await manager.start()

    done = await manager.compare(compare_request())

    assert done.state is JobState.COMPLETED and done.http_status == 200  # a verdict
    assert done.response.status == "error"
    expected = f"{harness_error}: {detail}" if harness_error else detail
    assert done.response.error == expected
    assert done.response.kernel_exec_result is not None
    assert done.response.kernel_exec_result.outcome is Outcome.NOT_RUN
    assert done.response.ref_exec_result == ref


async def test_a_timed_out_jobs_event_names_the_step_its_result_carries(
    make_manager: Callable[[FakeExecutor], JobManager], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kernel_eval.job_events")
    manager = make_manager(executor_of(answer(timed_out(
        "the job ran past its timeout (while nothing a parser should read)",
        stage="checking a timed sample of the custom kernel"))))
    await manager.start()
    job_id, outcome = manager.start_compare(compare_request())
    await outcome
    line = next(r.getMessage() for r in caplog.records if "timed_out" in r.getMessage())
    assert line.startswith(f"job {job_id} timed_out")
    assert line.endswith('stage="checking a timed sample of the custom kernel"')


async def test_the_worker_job_carries_the_request(
    make_manager: Callable[[FakeExecutor], JobManager], store: JobStore, tmp_path: Path
) -> None:
    executor = FakeExecutor()
    manager = make_manager(executor)
    await manager.start()

    job_id, pending = manager.start_compare(
        compare_request(num_trials=7, num_correct_trials=3, atol=1e-3, rtol=2e-3,
                        reuse_reference=False, robustness=True, timeout=42)
    )
    await pending
    validate_id, validated = manager.start_validate(CUSTOM, timeout=9)
    await validated

    job = executor.jobs[0]
    assert job.job_id == job_id and job.kind == "compare" and job.device == "cpu"
    assert job.kernel == CUSTOM and job.ref_kernel == REF
    assert (job.num_trials, job.num_correct_trials, job.atol, job.rtol) == (7, 3, 1e-3, 2e-3)
    assert job.reuse_reference is False and job.robustness is True
    written = json.loads((tmp_path / "jobs" / job_id / "request.json").read_text())
    assert written["job_id"] == job_id and written["num_trials"] == 7
    assert executor.jobs[1].kind == "validate" and executor.jobs[1].ref_kernel is None
    assert stored(store, job_id).kind == "compare"
    assert stored(store, validate_id).kind == "evaluate"


async def test_progress_is_forwarded_once_per_change_and_a_broken_callback_is_harmless(
    make_manager: Callable[[FakeExecutor], JobManager],
) -> None:
    manager = make_manager(executor_of(answer(compared())))
    await manager.start()
    seen: list[tuple[str, float]] = []

    async def record(message: str, fraction: float) -> None:
        seen.append((message, fraction))

    async def broken(message: str, fraction: float) -> None:
        raise RuntimeError("the client went away")

    await manager.compare(compare_request(), record)
    survived = await manager.compare(compare_request(), broken)

    assert seen == [("queued", 0.0), ("waiting for a device", 0.05), ("running", 0.5),
                    ("done", 1.0)]
    assert survived.state is JobState.COMPLETED


async def test_the_queue_length_is_the_executors(
    make_manager: Callable[[FakeExecutor], JobManager],
) -> None:
    executor = FakeExecutor()
    executor.queued = 3
    assert make_manager(executor).queue_length() == 3


# ---- start-up and shutdown -----------------------------------------------------------------------


async def test_start_fails_the_jobs_a_previous_run_left_unfinished(
    make_manager: Callable[[FakeExecutor], JobManager], store: JobStore
) -> None:
    for job_id in ("queued", "running", "done"):
        store.add(job_id, "compare", "{}")
    store.mark_running("running", None)
    store.mark_running("done", None)
    store.finish("done", JobState.COMPLETED, CompareResponse(job_id="done", status="success"), None)
    executor = FakeExecutor()

    await make_manager(executor).start()

    for job_id in ("queued", "running"):
        status = stored(store, job_id)
        assert status.state is JobState.FAILED, job_id
        assert status.error == "the server stopped while this job was in flight"
    done = stored(store, "done")
    assert done.state is JobState.COMPLETED and done.error is None
    assert executor.started and executor.jobs == []  # nothing is re-run


async def test_close_waits_for_a_running_job_within_the_grace(
    make_manager: Callable[[FakeExecutor], JobManager], store: JobStore
) -> None:
    running = Gate()
    executor = executor_of(answer(compared(), running=running))
    manager = make_manager(executor)
    await manager.start()
    job_id, pending = manager.start_compare(compare_request())
    await until(running.reached.is_set, "the job runs")

    closing = asyncio.create_task(manager.close(grace_s=30))
    await until(lambda: not manager.accepting, "close() stops intake")
    assert not closing.done() and not executor.closed  # still waiting for the job
    running.open()
    await closing

    assert (await pending).state is JobState.COMPLETED
    assert stored(store, job_id).state is JobState.COMPLETED
    assert executor.closed


async def test_close_fails_jobs_unfinished_after_the_grace_with_the_reason(
    make_manager: Callable[[FakeExecutor], JobManager], store: JobStore
) -> None:
    reached = Gate()
    executor = executor_of(hang(reached))
    manager = make_manager(executor)
    await manager.start()
    job_id, pending = manager.start_compare(compare_request())
    await until(reached.reached.is_set, "the job runs")

    await manager.close(grace_s=0.05)

    status = stored(store, job_id)
    assert status.state is JobState.FAILED and status.error == SHUTDOWN_REASON
    assert status.result is not None and status.result.status == "error"
    assert executor.closed
    with pytest.raises(asyncio.CancelledError):
        await pending


async def test_a_closed_manager_takes_no_new_jobs(
    make_manager: Callable[[FakeExecutor], JobManager], store: JobStore
) -> None:
    executor = FakeExecutor()
    manager = make_manager(executor)
    await manager.start()
    await manager.close(grace_s=0)

    with pytest.raises(ShuttingDown):
        manager.start_compare(compare_request())
    with pytest.raises(ShuttingDown):
        manager.start_evaluate(EvaluationRequest(kernel=CUSTOM))
    with pytest.raises(ShuttingDown):
        manager.start_validate(CUSTOM)

    counts = store.counts()
    assert (counts.queued, counts.running, counts.completed, counts.failed) == (0, 0, 0, 0)
    assert executor.jobs == []
