"""compare_batch on both clients against a fake server (httpx.MockTransport)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from kernel_eval_client import (
    AsyncKernelEvalClient,
    CompareBatchResult,
    InvalidRequestError,
    JobState,
    KernelCode,
    KernelEvalClient,
    KernelType,
    Outcome,
    ServerBusyError,
    ServerUnavailableError,
    UnexpectedResponseError,
)

REF = KernelCode(source_code="class Model: ...", kernel_type=KernelType.TORCH)
CANDIDATES = [
    KernelCode(source_code=f"class ModelNew: ...  # {i}", kernel_type=KernelType.TORCH)
    for i in range(3)
]


def line(index: int, state: str = "completed", status: int = 200, outcome: str = "success") -> str:
    response = {"job_id": f"job-{index}", "status": "success",
                "kernel_exec_result": {"outcome": outcome, "compiled": True}}
    return json.dumps({"index": index, "job_id": f"job-{index}", "state": state,
                       "status_code": status, "response": response})


def done(count: int) -> str:
    return json.dumps({"done": True, "count": count, "summary": {"success": count}})


STREAM = [line(2), line(0, "timed_out", 408, "timeout"), line(1, outcome="incorrect"), done(3)]


class FakeServer:
    """Answers POST /compare/batch with ``answers`` in turn (the last one repeats)."""

    def __init__(self, *answers: Callable[[], httpx.Response]) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        assert (request.method, request.url.path) == ("POST", "/compare/batch")
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return answer()

    def body(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.requests[-1].content)
        return result


def ndjson(lines: list[str]) -> Callable[[], httpx.Response]:
    return lambda: httpx.Response(
        200, content="".join(f"{text}\n" for text in lines).encode(),
        headers={"content-type": "application/x-ndjson"},
    )


def busy() -> httpx.Response:
    return httpx.Response(429, json={"detail": "the queue is full"}, headers={"retry-after": "0"})


def sync_client(server: FakeServer, **options: Any) -> KernelEvalClient:
    return KernelEvalClient("http://kernels.test", transport=httpx.MockTransport(server.handler),
                            **options)


def test_results_come_in_the_order_the_server_sends_them() -> None:
    fake = FakeServer(ndjson(STREAM))
    with sync_client(fake) as client:
        results = list(client.compare_batch(REF, CANDIDATES, num_trials=7, atol=1e-3,
                                            reuse_reference=False))

    assert [r.index for r in results] == [2, 0, 1]
    assert all(isinstance(r, CompareBatchResult) for r in results)
    assert results[1].state is JobState.TIMED_OUT and results[1].status_code == 408
    assert [r.verdict for r in results] == ["success", "timeout", "incorrect"]
    body = fake.body()
    assert [k["source_code"] for k in body["custom_kernels"]] == [c.source_code for c in CANDIDATES]
    assert (body["num_trials"], body["atol"], body["reuse_reference"]) == (7, 1e-3, False)


def test_the_request_is_sent_when_the_iteration_starts() -> None:
    fake = FakeServer(ndjson(STREAM))
    with sync_client(fake) as client:
        results = client.compare_batch(REF, CANDIDATES)
        assert fake.requests == []
        assert next(results).index == 2
    assert len(fake.requests) == 1


def test_a_full_queue_is_retried_then_raised() -> None:
    retried = FakeServer(busy, ndjson(STREAM))
    refused = FakeServer(busy)
    with sync_client(retried) as client:
        assert len(list(client.compare_batch(REF, CANDIDATES))) == 3
    with sync_client(refused, busy_retries=1) as client, pytest.raises(ServerBusyError):
        list(client.compare_batch(REF, CANDIDATES))

    assert len(retried.requests) == 2 and len(refused.requests) == 2


def test_a_stream_cut_short_raises_after_the_results_it_carried() -> None:
    fake = FakeServer(ndjson(STREAM[:2]))
    received: list[int] = []
    with sync_client(fake) as client, pytest.raises(ServerUnavailableError, match="2 of 3"):
        for result in client.compare_batch(REF, CANDIDATES):
            received.append(result.index)

    assert received == [2, 0]


@pytest.mark.parametrize(
    "lines", [[line(0), "not json", done(1)], [line(0), done(2)]], ids=["garbage", "miscount"]
)
def test_a_line_that_is_not_a_result_or_a_wrong_count_is_unexpected(lines: list[str]) -> None:
    with sync_client(FakeServer(ndjson(lines))) as client, pytest.raises(UnexpectedResponseError):
        list(client.compare_batch(REF, CANDIDATES[:1]))


def test_a_bad_batch_is_refused_before_anything_is_sent() -> None:
    fake = FakeServer(ndjson(STREAM))
    triton = KernelCode.model_construct(source_code="k", kernel_type=KernelType.TRITON)
    with sync_client(fake) as client:
        with pytest.raises(InvalidRequestError, match="custom_kernels"):
            client.compare_batch(REF, [])
        with pytest.raises(InvalidRequestError, match=r"custom_kernels\.1\.io"):
            client.compare_batch(REF, [CANDIDATES[0], triton])
    assert fake.requests == []


def test_an_invalid_answer_from_the_server_raises_naming_the_field() -> None:
    detail = {"detail": [{"loc": ["body", "custom_kernels", 0, "io"], "msg": "needs io"}]}
    fake = FakeServer(lambda: httpx.Response(400, json=detail))
    refused = pytest.raises(InvalidRequestError, match="custom_kernels.0.io")
    with sync_client(fake) as client, refused:
        list(client.compare_batch(REF, CANDIDATES))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_the_async_client_yields_the_same_results() -> None:
    fake = FakeServer(busy, ndjson(STREAM))
    transport = httpx.MockTransport(fake.handler)
    async with AsyncKernelEvalClient("http://kernels.test", transport=transport) as client:
        results = [r async for r in client.compare_batch(REF, CANDIDATES, timeout=30)]
    cut_short = httpx.MockTransport(FakeServer(ndjson(STREAM[:1])).handler)
    async with AsyncKernelEvalClient("http://kernels.test", transport=cut_short) as client:
        with pytest.raises(ServerUnavailableError):
            _ = [r async for r in client.compare_batch(REF, CANDIDATES)]

    assert [r.index for r in results] == [2, 0, 1]
    assert results[2].response.kernel_exec_result is not None
    assert results[2].response.kernel_exec_result.outcome is Outcome.INCORRECT
    assert fake.body()["timeout"] == 30 and len(fake.requests) == 2
