"""KernelEvalClient and AsyncKernelEvalClient against a fake server (httpx.MockTransport)."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from kernel_eval_client import (
    AsyncKernelEvalClient,
    CompareResponse,
    EvaluationResponse,
    HealthResponse,
    InvalidRequestError,
    IOContractBuilder,
    JobNotFoundError,
    JobState,
    JobStatusResponse,
    JobTimeoutError,
    KernelCode,
    KernelEvalClient,
    KernelEvalError,
    KernelType,
    Outcome,
    RequestTimeoutError,
    ServerError,
    ServerUnavailableError,
    StatsResponse,
    UnexpectedResponseError,
    create_randn_spec,
)

SOURCE = (
    "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2"
)
KERNEL = KernelCode(
    source_code=SOURCE,
    kernel_type=KernelType.TORCH,
    io=IOContractBuilder().add_input_tensor("x", create_randn_spec([16], seed=1)).build(),
)
STATS = {
    "mean": 1.5, "std": 0.1, "min": 1.4, "max": 1.9, "median": 1.5, "percentile_95": 1.8,
    "percentile_99": 1.85, "num_samples": 100, "method": "cpu_perf_counter", "device": "cpu",
}  # fmt: skip
EXEC_RESULT = {"outcome": "success", "compiled": True, "runtime": 1.5, "runtime_stats": STATS}
# What FastAPI answers for a body whose kernel_type is not a KernelType.
FASTAPI_422 = {
    "detail": [
        {
            "type": "enum",
            "loc": ["body", "kernel", "kernel_type"],
            "msg": "Input should be 'torch', 'torch_cuda', 'triton', 'cuda' or 'multi_kernel'",
            "input": "fortran",
            "ctx": {"expected": "'torch', 'torch_cuda', 'triton', 'cuda' or 'multi_kernel'"},
        },
        {
            "type": "greater_than_equal",
            "loc": ["body", "num_trials"],
            "msg": "Input should be greater than or equal to 1",
            "input": 0,
        },
    ]
}


class FakeServer:
    """Routes ``(method, path)`` to canned answers and records every request."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.routes: dict[tuple[str, str], Callable[[httpx.Request], httpx.Response]] = {
            ("POST", "/evaluate"): lambda r: httpx.Response(
                200, json={"job_id": "j1", "status": "success", "kernel_exec_result": EXEC_RESULT}
            ),
            ("POST", "/validate"): lambda r: httpx.Response(
                200, json={"job_id": "j2", "status": "success", "kernel_exec_result": EXEC_RESULT}
            ),
            ("POST", "/compare"): lambda r: httpx.Response(
                200,
                json={
                    "job_id": "j3",
                    "status": "success",
                    "kernel_exec_result": EXEC_RESULT,
                    "ref_runtime": {**STATS, "mean": 3.0},
                    "ref_exec_result": EXEC_RESULT,
                },
            ),
            ("GET", "/health"): lambda r: httpx.Response(
                200,
                json={"status": "healthy", "gpu_available": False, "gpu_count": 0, "device": "cpu"},
            ),
            ("GET", "/stats"): lambda r: httpx.Response(
                200,
                json={
                    "jobs_completed": 3,
                    "jobs_failed": 0,
                    "jobs_timed_out": 1,
                    "jobs_queued": 0,
                    "jobs_running": 0,
                    "avg_runtime_ms": 10.0,
                    "gpu_utilization_pct": 0.0,
                    "uptime_seconds": 5.0,
                    "device": "cpu",
                    "gpu_count": 0,
                    "worker_slots": 2,
                },
            ),
        }

    def answer(self, method: str, path: str, status: int, body: Any) -> None:
        self.routes[(method, path)] = lambda r: httpx.Response(status, json=body)

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        route = self.routes.get((request.method, request.url.path))
        if route is None:
            return httpx.Response(404, json={"detail": "Not Found"})
        return route(request)

    def body(self, index: int = -1) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.requests[index].content)
        return result


@pytest.fixture
def server() -> FakeServer:
    return FakeServer()


@pytest.fixture
def client(server: FakeServer) -> KernelEvalClient:
    return KernelEvalClient("http://kernels.test", transport=httpx.MockTransport(server.handler))


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- typed results --------------------------------------------------------------------------------


def test_evaluate_sends_the_request_and_returns_the_typed_result(
    client: KernelEvalClient, server: FakeServer
) -> None:
    result = client.evaluate(KERNEL, num_trials=7, timeout=30)

    assert isinstance(result, EvaluationResponse)
    assert result.kernel_exec_result is not None
    assert result.kernel_exec_result.outcome is Outcome.SUCCESS
    assert result.kernel_exec_result.runtime_stats is not None
    assert result.kernel_exec_result.runtime_stats.percentile_99 == 1.85
    body = server.body()
    assert body["num_trials"] == 7 and body["timeout"] == 30
    assert body["kernel"]["kernel_type"] == "torch"
    assert body["kernel"]["io"]["args"][0]["tensor_spec"]["init"]["seed"] == 1
    assert "enable_device_metrics" not in body  # unset: the server's default applies
    # The HTTP timeout covers the job's timeout plus the margin for queueing.
    assert server.requests[-1].extensions["timeout"]["read"] == 30 + 60
    assert server.requests[-1].headers["user-agent"].startswith("kernel-eval-client/")


def test_compare_returns_reference_and_custom_results(
    client: KernelEvalClient, server: FakeServer
) -> None:
    custom = KERNEL.model_copy(update={"kernel_type": KernelType.TRITON})

    result = client.compare(KERNEL, custom, num_correct_trials=3, atol=1e-4, timeout=10)

    assert isinstance(result, CompareResponse)
    assert result.ref_runtime is not None and result.ref_runtime.mean == 3.0
    body = server.body()
    assert body["ref_kernel"]["kernel_type"] == "torch"
    assert body["custom_kernel"]["kernel_type"] == "triton"
    assert (body["num_correct_trials"], body["atol"], body["timeout"]) == (3, 1e-4, 10)
    assert "rtol" not in body


def test_validate_posts_kernel_and_timeout_only(
    client: KernelEvalClient, server: FakeServer
) -> None:
    result = client.validate(KERNEL, timeout=15)

    assert result.job_id == "j2"
    assert server.requests[-1].url.path == "/validate"
    assert set(server.body()) == {"kernel", "timeout"} and server.body()["timeout"] == 15


def test_health_stats_and_job_status(client: KernelEvalClient, server: FakeServer) -> None:
    server.answer(
        "GET", "/job/a b",
        200,
        {"job_id": "a b", "kind": "evaluate", "state": "completed", "created_at": 1.0},
    )  # fmt: skip

    health = client.health()
    stats = client.stats()
    job = client.job_status("a b")

    assert isinstance(health, HealthResponse) and health.device == "cpu"
    assert isinstance(stats, StatsResponse) and stats.jobs_timed_out == 1
    assert isinstance(job, JobStatusResponse) and job.state is JobState.COMPLETED
    assert server.requests[-1].url.raw_path == b"/job/a%20b"


# ---- errors --------------------------------------------------------------------------------------


def test_422_is_invalid_request_naming_each_field(
    client: KernelEvalClient, server: FakeServer
) -> None:
    server.answer("POST", "/evaluate", 422, FASTAPI_422)

    with pytest.raises(InvalidRequestError) as caught:
        client.evaluate(KERNEL)

    message = str(caught.value)
    assert "kernel.kernel_type: Input should be 'torch'" in message
    assert "num_trials: Input should be greater than or equal to 1" in message
    assert "body" not in message
    assert caught.value.status_code == 422
    assert [e["loc"][-1] for e in caught.value.errors] == ["kernel_type", "num_trials"]


def test_invalid_arguments_are_refused_before_sending(
    client: KernelEvalClient, server: FakeServer
) -> None:
    with pytest.raises(InvalidRequestError, match=r"num_trials: Input should be greater"):
        client.evaluate(KERNEL, num_trials=0)
    with pytest.raises(InvalidRequestError, match=r"timeout: Input should be less"):
        client.validate(KERNEL, timeout=601)

    assert server.requests == []


def test_408_is_job_timeout_with_the_servers_message(
    client: KernelEvalClient, server: FakeServer
) -> None:
    server.answer(
        "POST", "/evaluate", 408,
        {"job_id": "j9", "status": "error", "error": "Evaluation timed out after 5 seconds"},
    )  # fmt: skip

    with pytest.raises(JobTimeoutError) as caught:
        client.evaluate(KERNEL, timeout=5)

    assert "Evaluation timed out after 5 seconds" in str(caught.value)
    assert caught.value.job_id == "j9" and caught.value.status_code == 408


def test_404_on_job_is_job_not_found(client: KernelEvalClient, server: FakeServer) -> None:
    with pytest.raises(JobNotFoundError, match="no job with id 'nope'"):
        client.job_status("nope")


def test_5xx_is_server_error_with_the_detail(client: KernelEvalClient, server: FakeServer) -> None:
    server.answer("POST", "/compare", 500, {"detail": "internal server error: disk full"})

    with pytest.raises(ServerError, match="disk full") as caught:
        client.compare(KERNEL, KERNEL)

    assert caught.value.status_code == 500


def test_a_body_that_is_not_the_model_is_unexpected(
    client: KernelEvalClient, server: FakeServer
) -> None:
    server.answer("GET", "/health", 200, {"hello": "world"})
    server.answer("GET", "/stats", 418, {"detail": "teapot"})

    with pytest.raises(UnexpectedResponseError, match="not a valid HealthResponse"):
        client.health()
    with pytest.raises(UnexpectedResponseError, match=r"HTTP 418\): teapot"):
        client.stats()


def test_connection_refused_is_server_unavailable() -> None:
    url = f"http://127.0.0.1:{closed_port()}"

    with KernelEvalClient(url) as client, pytest.raises(ServerUnavailableError) as caught:
        client.health()

    assert url in str(caught.value)
    assert isinstance(caught.value.__cause__, httpx.ConnectError)
    assert isinstance(caught.value, KernelEvalError)


def test_client_side_timeout_is_request_timeout() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    client = KernelEvalClient("http://kernels.test", transport=httpx.MockTransport(slow))

    with pytest.raises(RequestTimeoutError, match="may still be running") as caught:
        client.evaluate(KERNEL)
    assert isinstance(caught.value.__cause__, httpx.ReadTimeout)


def test_context_manager_closes_and_base_url_is_checked(server: FakeServer) -> None:
    with KernelEvalClient(
        "http://kernels.test/", transport=httpx.MockTransport(server.handler)
    ) as c:
        assert c.base_url == "http://kernels.test"
    assert c._http.is_closed
    with pytest.raises(ValueError, match="http"):
        KernelEvalClient("localhost:8000")


def test_server_url_defaults_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNEL_EVAL_SERVER", "http://gpu-box:9000")
    assert KernelEvalClient().base_url == "http://gpu-box:9000"
    monkeypatch.delenv("KERNEL_EVAL_SERVER")
    assert KernelEvalClient().base_url == "http://localhost:8000"


# ---- async --------------------------------------------------------------------------------------


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_async_client_returns_typed_results_and_maps_errors(server: FakeServer) -> None:
    server.answer("POST", "/validate", 422, FASTAPI_422)
    transport = httpx.MockTransport(server.handler)

    async with AsyncKernelEvalClient("http://kernels.test", transport=transport) as client:
        evaluated = await client.evaluate(KERNEL, num_trials=3)
        compared = await client.compare(KERNEL, KERNEL)
        health = await client.health()
        with pytest.raises(InvalidRequestError, match="kernel.kernel_type"):
            await client.validate(KERNEL)

    assert evaluated.kernel_exec_result is not None and evaluated.job_id == "j1"
    assert isinstance(compared, CompareResponse) and compared.ref_runtime is not None
    assert health.status == "healthy"
    assert server.body(0)["num_trials"] == 3


@pytest.mark.anyio
async def test_async_connection_refused_is_server_unavailable() -> None:
    async with AsyncKernelEvalClient(f"http://127.0.0.1:{closed_port()}") as client:
        with pytest.raises(ServerUnavailableError):
            await client.stats()
