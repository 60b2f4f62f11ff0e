"""The clients' 429 retries, ?wait=false polling and API key, against a fake server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from kernel_eval_client import (
    AsyncKernelEvalClient,
    AuthenticationError,
    CompareResponse,
    EvaluationResponse,
    JobState,
    JobStatusResponse,
    JobTimeoutError,
    KernelCode,
    KernelEvalClient,
    KernelType,
    RequestTimeoutError,
    ServerBusyError,
    ServerError,
    cli,
)
from kernel_eval_client._http import POLL_MAX_S, POLL_WATCHED_MAX_S, _Calls, _Poll

KERNEL = KernelCode(source_code="class Model: ...", kernel_type=KernelType.TORCH)
RESULT = {
    "job_id": "j1", "status": "success",
    "kernel_exec_result": {"outcome": "success", "compiled": True, "runtime": 1.5},
}  # fmt: skip
URL = "http://kernels.test"

class Script:
    """Answers each request with the next scripted response for its path; records requests."""

    def __init__(self, answers: dict[str, list[httpx.Response]]) -> None:
        self.answers = answers
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        queue = self.answers[request.url.path]
        return queue.pop(0) if len(queue) > 1 else queue[0]

    def paths(self) -> list[str]:
        return [f"{r.method} {r.url.path}{'?' + r.url.query.decode() if r.url.query else ''}"
                for r in self.requests]


def busy(retry_after: str | None = "0") -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    detail = "the server's queue is full (limit MAX_QUEUED_JOBS=1)"
    return httpx.Response(429, headers=headers, json={"detail": detail})


def job(state: str, result: dict[str, Any] | None = None, error: str | None = None) -> httpx.Response:
    """GET /job/j1's answer."""
    body = {"job_id": "j1", "kind": "evaluate", "state": state, "created_at": 1.0,
            "result": result, "error": error}
    return httpx.Response(200, json=body)


def accepted() -> httpx.Response:
    """A submission's answer with ?wait=false."""
    return httpx.Response(202, json=job("queued").json())


@pytest.fixture(autouse=True)
def no_key_in_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("KERNEL_EVAL_API_KEY", raising=False)
    yield


def sync_client(script: Script, **kwargs: Any) -> KernelEvalClient:
    return KernelEvalClient(URL, transport=httpx.MockTransport(script), **kwargs)


def async_client(script: Script, **kwargs: Any) -> AsyncKernelEvalClient:
    return AsyncKernelEvalClient(URL, transport=httpx.MockTransport(script), **kwargs)


# ---- 429: retried with backoff -------------------------------------------------------------------


def test_a_busy_server_is_retried_until_it_accepts() -> None:
    script = Script({"/evaluate": [busy(), busy(), httpx.Response(200, json=RESULT)]})
    result = sync_client(script).evaluate(KERNEL)
    assert isinstance(result, EvaluationResponse) and result.job_id == "j1"
    assert script.paths() == ["POST /evaluate"] * 3


def test_retries_are_bounded_and_end_in_server_busy_error() -> None:
    script = Script({"/compare": [busy("0")]})
    with pytest.raises(ServerBusyError, match="MAX_QUEUED_JOBS") as caught:
        sync_client(script, busy_retries=2).compare(KERNEL, KERNEL)
    assert len(script.requests) == 3
    assert caught.value.status_code == 429 and caught.value.retry_after == 0


def test_no_retries_when_busy_retries_is_zero() -> None:
    script = Script({"/validate": [busy("0")]})
    with pytest.raises(ServerBusyError):
        sync_client(script, busy_retries=0).validate(KERNEL)
    assert len(script.requests) == 1


def test_the_async_client_retries_too() -> None:
    script = Script({"/validate": [busy(), httpx.Response(200, json=RESULT)]})

    async def run() -> EvaluationResponse:
        async with async_client(script) as client:
            return await client.validate(KERNEL)

    assert asyncio.run(run()).job_id == "j1"
    assert len(script.requests) == 2


def test_other_errors_are_not_retried() -> None:
    script = Script({"/evaluate": [httpx.Response(500, json={"detail": "boom"})]})
    with pytest.raises(ServerError):
        sync_client(script).evaluate(KERNEL)
    assert len(script.requests) == 1


@pytest.mark.parametrize(
    ("header", "attempt", "expected"),
    [
        ("7", 0, 7.0),  # the server's hint wins over the backoff
        ("2.5", 3, 2.5),
        ("600", 0, 60.0),  # capped
        (None, 0, 1.0),  # no hint: exponential backoff
        (None, 1, 2.0),
        (None, 3, 8.0),
        (None, 9, 60.0),
        ("soon", 2, 4.0),  # an unusable hint is ignored
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0, 0.0),  # a date in the past: now
    ],
)
def test_retry_delay_honours_retry_after_else_backs_off(
    header: str | None, attempt: int, expected: float
) -> None:
    calls = _Calls(URL, 60.0, busy_retries=20)
    assert calls.retry_delay(busy(header), attempt) == expected


def test_retry_delay_is_none_for_other_answers_and_after_the_last_retry() -> None:
    calls = _Calls(URL, 60.0, busy_retries=2)
    assert calls.retry_delay(httpx.Response(200), 0) is None
    assert calls.retry_delay(httpx.Response(503), 0) is None
    assert calls.retry_delay(busy(), 1) == 0.0
    assert calls.retry_delay(busy(), 2) is None


# ---- ?wait=false and polling ---------------------------------------------------------------------


def test_poll_submits_without_waiting_and_polls_until_the_job_is_final() -> None:
    script = Script({
        "/evaluate": [accepted()],
        "/job/j1": [job("queued"), job("running"), job("completed", result=RESULT)],
    })  # fmt: skip
    result = sync_client(script).evaluate(KERNEL, poll=True)
    assert isinstance(result, EvaluationResponse)
    assert result.kernel_exec_result is not None and result.kernel_exec_result.runtime == 1.5
    assert script.paths() == ["POST /evaluate?wait=false"] + ["GET /job/j1"] * 3


def test_poll_returns_the_compare_fields_for_compare() -> None:
    compared = {**RESULT, "ref_runtime": None, "ref_exec_result": RESULT["kernel_exec_result"]}
    script = Script({"/compare": [accepted()], "/job/j1": [job("completed", result=compared)]})
    result = sync_client(script).compare(KERNEL, KERNEL, poll=True)
    assert isinstance(result, CompareResponse) and result.ref_exec_result is not None


def test_poll_of_a_timed_out_job_raises_job_timeout_error() -> None:
    script = Script({
        "/validate": [accepted()],
        "/job/j1": [job("timed_out", error="Evaluation timed out after 5 seconds")],
    })  # fmt: skip
    with pytest.raises(JobTimeoutError, match="timed out after 5 seconds") as caught:
        sync_client(script).validate(KERNEL, poll=True)
    assert caught.value.job_id == "j1"
    assert script.paths()[0] == "POST /validate?wait=false"


def test_poll_of_a_failed_job_raises_server_error() -> None:
    script = Script({"/evaluate": [accepted()], "/job/j1": [job("failed", error="lost")]})
    with pytest.raises(ServerError, match="failed in the server: lost"):
        sync_client(script).evaluate(KERNEL, poll=True)


def test_the_async_client_polls_too() -> None:
    script = Script({
        "/evaluate": [accepted()],
        "/job/j1": [job("running"), job("completed", result=RESULT)],
    })  # fmt: skip

    async def run() -> EvaluationResponse:
        async with async_client(script) as client:
            return await client.evaluate(KERNEL, poll=True)

    assert asyncio.run(run()).job_id == "j1"
    assert len(script.requests) == 3


def test_poll_backs_off_and_gives_up_at_the_deadline() -> None:
    calls = _Calls(URL, timeout_margin=10.0)
    call = calls.evaluate(KERNEL, 1, timeout=20, enable_device_metrics=None)
    accepted = JobStatusResponse.model_validate(job("queued").json())
    poll = _Poll(calls, call, accepted, now=100.0)
    delays = [poll.next_delay(now=100.0) for _ in range(8)]
    assert delays == sorted(delays) and delays[0] < 0.1 and delays[-1] == 2.0
    assert poll.next_delay(now=129.5) == pytest.approx(0.5)  # never past the deadline
    with pytest.raises(RequestTimeoutError, match="GET /job/j1"):
        poll.next_delay(now=130.0)  # 20 s timeout + 10 s margin



def test_on_status_polls_and_hands_over_each_status_read_then_the_answer() -> None:
    script = Script({
        "/compare": [accepted()],
        "/job/j1": [job("running"), job("completed", result=RESULT)],
    })  # fmt: skip
    seen: list[JobState] = []

    result = sync_client(script).compare(KERNEL, KERNEL, on_status=lambda s: seen.append(s.state))

    assert result.job_id == "j1"
    assert script.paths() == ["POST /compare?wait=false"] + ["GET /job/j1"] * 2
    assert seen == [JobState.QUEUED, JobState.RUNNING, JobState.COMPLETED]


def test_the_async_client_hands_over_each_status_too() -> None:
    script = Script({"/validate": [accepted()], "/job/j1": [job("completed", result=RESULT)]})
    seen: list[JobState] = []

    async def run() -> EvaluationResponse:
        async with async_client(script) as client:
            return await client.validate(KERNEL, on_status=lambda s: seen.append(s.state))

    assert asyncio.run(run()).job_id == "j1"
    assert seen == [JobState.QUEUED, JobState.COMPLETED]


def test_a_watched_job_is_looked_at_more_often() -> None:
    calls = _Calls(URL, timeout_margin=10.0)
    call = calls.evaluate(KERNEL, 1, timeout=20, enable_device_metrics=None)
    accepted = JobStatusResponse.model_validate(job("queued").json())
    watched, unwatched = (calls.poll(call, accepted, now=100.0, watched=w) for w in (True, False))

    assert max(watched.next_delay(now=100.0) for _ in range(8)) == POLL_WATCHED_MAX_S
    assert max(unwatched.next_delay(now=100.0) for _ in range(8)) == POLL_MAX_S > POLL_WATCHED_MAX_S


# ---- API key -------------------------------------------------------------------------------------


def health_script() -> Script:
    body = {"status": "healthy", "gpu_available": False, "gpu_count": 0, "device": "cpu"}
    return Script({"/health": [httpx.Response(200, json=body)]})


def test_the_api_key_is_sent_as_a_bearer_token() -> None:
    script = health_script()
    sync_client(script, api_key="k1").health()
    assert script.requests[0].headers["authorization"] == "Bearer k1"


def test_the_api_key_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNEL_EVAL_API_KEY", "from-env")
    script = health_script()
    sync_client(script).health()
    sync_client(script, api_key="explicit").health()
    assert [r.headers["authorization"] for r in script.requests] == [
        "Bearer from-env", "Bearer explicit"
    ]


def test_without_a_key_no_authorization_header_is_sent() -> None:
    script = health_script()
    sync_client(script).health()
    assert "authorization" not in script.requests[0].headers


def test_a_refused_key_raises_authentication_error_with_a_hint() -> None:
    refused = httpx.Response(401, json={"detail": "this server requires an API key"})
    script = Script({"/stats": [refused]})
    with pytest.raises(AuthenticationError, match="KERNEL_EVAL_API_KEY") as caught:
        sync_client(script).stats()
    assert caught.value.status_code == 401


def test_cli_api_key_flag_sends_the_key_and_a_refusal_is_a_usage_error() -> None:
    script = health_script()
    code = cli.main(["health", "--server", URL, "--api-key", "k2"],
                    transport=httpx.MockTransport(script))
    assert code == cli.EXIT_OK
    assert script.requests[0].headers["authorization"] == "Bearer k2"
    refused = Script({"/health": [httpx.Response(401, json={"detail": "invalid API key"})]})
    code = cli.main(["health", "--server", URL], transport=httpx.MockTransport(refused))
    assert code == cli.EXIT_USAGE
