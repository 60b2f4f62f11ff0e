"""The MCP tools, through the SDK's in-memory client, against a fake JobManager.

The fake records what it was asked and answers with canned wire models and a job state (never
an HTTP status: the tools derive their error results from the state); the real JobManager is
exercised by the end-to-end tests.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

import anyio
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from mcp.client import Client
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import CallToolResult
from mcp_types.version import LATEST_HANDSHAKE_VERSION
from pydantic import ValidationError

from mcp_server import (
    BatchResults,
    ServerStatus,
    create_mcp_server,
    mount_mcp,
    transport_security_for,
)
from shared.models import (
    CompareRequest,
    CompareResponse,
    EvaluationRequest,
    EvaluationResponse,
    HealthResponse,
    JobState,
    JobStatusResponse,
    KernelCode,
    KernelExecResult,
    KernelType,
    Outcome,
    RuntimeStats,
    StatsResponse,
)
from shared.settings import Settings

if TYPE_CHECKING:
    from orchestration.job_manager import JobManager

ProgressFn = Callable[[str, float], Awaitable[None]]

TORCH_SOURCE = (
    "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2"
)
X_IO = {
    "args": [
        {
            "name": "x",
            "type": "tensor",
            "role": "input",
            "tensor_spec": {
                "shape": [1024],
                "dtype": "float32",
                "init": {"kind": "randn", "seed": 1},
            },
        }
    ]
}
TOOL_NAMES = {
    "evaluate_kernel",
    "compare_kernels",
    "compare_batch",
    "validate_kernel",
    "get_server_stats",
    "get_job_status",
}


def stats(mean: float) -> RuntimeStats:
    return RuntimeStats(
        mean=mean,
        std=0.01,
        min=mean * 0.9,
        max=mean * 1.2,
        median=mean,
        percentile_95=mean * 1.1,
        percentile_99=mean * 1.15,
        num_samples=100,
        method="cpu_perf_counter",
        device="cpu",
    )


def success(mean: float = 1.5) -> KernelExecResult:
    return KernelExecResult(
        outcome=Outcome.SUCCESS, compiled=True, runtime=mean, runtime_stats=stats(mean)
    )


@dataclass(frozen=True)
class FakeOutcome:
    """A JobOutcome without ``http_status``: a tool that reads it fails."""

    state: JobState
    response: CompareResponse


@dataclass
class FakeJobManager:
    """Answers every job with ``result`` (or raises ``fault``), reporting ``progress`` first.

    A compare job whose custom source is a key of ``by_source`` gets that state and result.
    """

    result: KernelExecResult = field(default_factory=success)
    ref_result: KernelExecResult | None = None
    state: JobState = JobState.COMPLETED
    status: Literal["success", "error"] | None = None  # default: "error" unless completed
    error: str | None = None
    by_source: dict[str, tuple[JobState, KernelExecResult]] = field(default_factory=dict)
    fault: Exception | None = None
    progress: list[tuple[str, float]] = field(default_factory=list)
    # When set, the job waits for this event after reporting its progress.
    release: anyio.Event | None = None
    calls: list[tuple[str, Any]] = field(default_factory=list)
    jobs: dict[str, JobStatusResponse] = field(default_factory=dict)
    queued: int = 0  # jobs waiting for a device, as the admission check sees them
    started: int = 0  # jobs queued by start_compare
    batch_ids: set[str | None] = field(default_factory=set)  # the batches they belong to

    async def _answer(self, kind: str, request: Any, on_progress: ProgressFn | None,
                      job_id: str | None = None) -> FakeOutcome:
        self.calls.append((kind, request))
        job_id = job_id or f"job-{len(self.calls)}"
        if self.fault is not None:
            raise self.fault
        for message, fraction in self.progress:
            assert on_progress is not None
            await on_progress(message, fraction)
        if self.release is not None:
            await self.release.wait()
        state, result = self.state, self.result
        if kind == "compare" and request.custom_kernel.source_code in self.by_source:
            state, result = self.by_source[request.custom_kernel.source_code]
        response = CompareResponse(
            job_id=job_id,
            status=self.status or ("success" if state is JobState.COMPLETED else "error"),
            kernel_exec_result=result,
            error=self.error,
        )
        if kind == "compare":
            ref = self.ref_result or success(3.0)
            response.ref_exec_result = ref
            response.ref_runtime = ref.runtime_stats
        return FakeOutcome(state, response)

    def start_compare(
        self, request: CompareRequest, on_progress: ProgressFn | None = None,
        batch_id: str | None = None,
    ) -> tuple[str, Awaitable[FakeOutcome]]:
        self.started += 1
        self.batch_ids.add(batch_id)
        job_id = f"batch-job-{self.started}"
        return job_id, self._answer("compare", request, on_progress, job_id)

    async def evaluate(
        self, request: EvaluationRequest, on_progress: ProgressFn | None = None
    ) -> FakeOutcome:
        return await self._answer("evaluate", request, on_progress)

    async def compare(
        self, request: CompareRequest, on_progress: ProgressFn | None = None
    ) -> FakeOutcome:
        return await self._answer("compare", request, on_progress)

    async def validate(
        self, kernel: KernelCode, timeout: int = 120, on_progress: ProgressFn | None = None
    ) -> FakeOutcome:
        return await self._answer("validate", (kernel, timeout), on_progress)

    def job_status(self, job_id: str) -> JobStatusResponse | None:
        return self.jobs.get(job_id)

    def queue_length(self) -> int:
        return self.queued

    def stats(self) -> StatsResponse:
        return StatsResponse(
            jobs_completed=7,
            jobs_failed=1,
            jobs_timed_out=0,
            jobs_queued=2,
            jobs_running=1,
            avg_runtime_ms=12.5,
            gpu_utilization_pct=0.0,
            uptime_seconds=60.0,
            device="cpu",
            gpu_count=0,
            worker_slots=2,
        )

    def health(self) -> HealthResponse:
        return HealthResponse(
            status="healthy",
            gpu_available=False,
            gpu_count=0,
            device="cpu",
            kernel_types=[KernelType.TORCH, KernelType.TRITON],
        )


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def manager() -> FakeJobManager:
    return FakeJobManager()


@pytest.fixture(params=["auto", "legacy"])
async def client(request: pytest.FixtureRequest, manager: FakeJobManager) -> AsyncIterator[Client]:
    """An in-memory client, over both the modern direct path and the legacy JSON-RPC streams."""
    server = mcp_for(manager, Settings())
    async with Client(server, mode=request.param) as c:
        yield c


def mcp_for(
    manager: FakeJobManager, settings: Settings, heartbeat_s: float = 3600,
    queue_allowance_s: float = 300,
) -> MCPServer:
    return create_mcp_server(
        lambda: cast("JobManager", manager), settings, heartbeat_s=heartbeat_s,
        queue_allowance_s=queue_allowance_s,
    )


def structured(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None, result
    return result.structured_content


def text_of(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


pytestmark = pytest.mark.anyio


# ---- listing ---------------------------------------------------------------------------------


async def test_lists_the_tools_with_input_and_output_schemas(client: Client) -> None:
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}

    assert set(tools) == TOOL_NAMES
    for tool in tools.values():
        assert tool.description and len(tool.description) > 80, tool.name
        assert tool.output_schema is not None, tool.name
        assert "ctx" not in tool.input_schema.get("properties", {}), tool.name
    evaluate = tools["evaluate_kernel"].input_schema
    assert evaluate["required"] == ["kernel_source", "kernel_type"]
    assert evaluate["properties"]["num_trials"]["default"] is None  # adaptive, as over REST
    assert "IOContract" in evaluate["$defs"]
    assert set(tools["compare_kernels"].input_schema["required"]) == {
        "ref_source",
        "ref_type",
        "custom_source",
        "custom_type",
    }
    outputs = {name: tool.output_schema or {} for name, tool in tools.items()}
    assert "kernel_exec_result" in outputs["evaluate_kernel"]["properties"]
    assert "ref_runtime" in outputs["compare_kernels"]["properties"]
    assert set(outputs["get_server_stats"]["properties"]) == {"health", "stats"}
    batch = tools["compare_batch"].input_schema
    assert set(batch["required"]) == {"ref_source", "ref_type", "custom_kernels"}
    assert batch["properties"]["custom_kernels"]["maxItems"] == 1000
    assert {"results", "summary"} <= set(outputs["compare_batch"]["properties"])


# ---- verdicts ---------------------------------------------------------------------------------


async def test_evaluate_kernel_returns_the_verdict(client: Client, manager: FakeJobManager) -> None:
    result = await client.call_tool(
        "evaluate_kernel",
        {
            "kernel_source": TORCH_SOURCE,
            "kernel_type": "torch",
            "io": X_IO,
            "num_trials": 50,
            "metadata": {"function_name": "f"},
        },
    )

    assert not result.is_error, text_of(result)
    response = EvaluationResponse.model_validate(result.structured_content)
    assert response.kernel_exec_result == success()
    assert "ref_runtime" not in result.structured_content
    assert "success" in text_of(result) and "1.5 ms" in text_of(result)
    kind, request = manager.calls[0]
    assert kind == "evaluate"
    assert isinstance(request, EvaluationRequest)
    assert request.num_trials == 50
    assert request.kernel.kernel_type is KernelType.TORCH
    assert request.kernel.io is not None and request.kernel.io.args[0].name == "x"
    assert request.kernel.meta().function_name == "f"


async def test_compile_error_is_a_normal_result_with_the_full_message(
    client: Client, manager: FakeJobManager
) -> None:
    message = 'kernel.cu(3): error: identifier "blockIdxx" is undefined'
    manager.result = KernelExecResult(
        outcome=Outcome.COMPILE_ERROR, compiled=False, compilation_error=message
    )

    io = {"args": [], "launch": {"grid": {"x": 1}, "block": {"x": 32}}}
    result = await client.call_tool(
        "evaluate_kernel",
        {"kernel_source": "__global__ void k() {}", "kernel_type": "cuda", "io": io},
    )

    assert not result.is_error
    assert structured(result)["kernel_exec_result"]["outcome"] == "compile_error"
    assert "compile_error" in text_of(result)
    assert message in text_of(result)


async def test_compare_kernels_reports_speedup_and_passes_every_argument(
    client: Client, manager: FakeJobManager
) -> None:
    result = await client.call_tool(
        "compare_kernels",
        {
            "ref_source": TORCH_SOURCE,
            "ref_type": "torch",
            "custom_source": "x",
            "custom_type": "triton",
            "custom_io": X_IO,
            "num_trials": 10,
            "num_correct_trials": 3,
            "atol": 1e-3,
            "rtol": 1e-2,
            "timeout": 30,
        },
    )

    assert not result.is_error, text_of(result)
    response = CompareResponse.model_validate(result.structured_content)
    assert response.ref_runtime is not None and response.ref_runtime.mean == 3.0
    assert "speedup 2x" in text_of(result)
    kind, request = manager.calls[0]
    assert kind == "compare" and isinstance(request, CompareRequest)
    assert request.custom_kernel.kernel_type is KernelType.TRITON
    assert request.custom_kernel.io is not None and request.ref_kernel.io is None
    assert (request.num_trials, request.num_correct_trials, request.timeout) == (10, 3, 30)
    assert (request.atol, request.rtol) == (1e-3, 1e-2)


async def test_incorrect_custom_kernel_is_a_normal_result(
    client: Client, manager: FakeJobManager
) -> None:
    manager.result = KernelExecResult(
        outcome=Outcome.INCORRECT,
        compiled=True,
        correctness=False,
        validation_error="max abs diff 0.5 > atol 1e-5 at index 17",
    )

    result = await client.call_tool(
        "compare_kernels",
        {
            "ref_source": TORCH_SOURCE,
            "ref_type": "torch",
            "custom_source": TORCH_SOURCE,
            "custom_type": "torch",
        },
    )

    assert not result.is_error
    assert structured(result)["kernel_exec_result"]["correctness"] is False
    assert "incorrect" in text_of(result) and "at index 17" in text_of(result)


async def test_failing_reference_is_a_normal_result(
    client: Client, manager: FakeJobManager
) -> None:
    # What the JobManager answers when the reference does not compile: 200, status "error".
    manager.status = "error"
    manager.error = "the reference kernel failed to compile: SyntaxError: invalid syntax (line 3)"
    manager.result = KernelExecResult(outcome=Outcome.NOT_RUN)
    manager.ref_result = KernelExecResult(
        outcome=Outcome.COMPILE_ERROR, compilation_error="SyntaxError: invalid syntax (line 3)"
    )

    result = await client.call_tool(
        "compare_kernels",
        {"ref_source": "def (", "ref_type": "torch", "custom_source": "x", "custom_type": "torch"},
    )

    assert not result.is_error
    assert structured(result)["ref_exec_result"]["outcome"] == "compile_error"
    assert "REFERENCE kernel failed" in text_of(result)
    assert "invalid syntax (line 3)" in text_of(result)


async def test_validate_kernel_passes_kernel_and_timeout(
    client: Client, manager: FakeJobManager
) -> None:
    result = await client.call_tool(
        "validate_kernel",
        {"kernel_source": TORCH_SOURCE, "kernel_type": "torch", "io": X_IO, "timeout": 15},
    )

    assert not result.is_error, text_of(result)
    assert EvaluationResponse.model_validate(result.structured_content).status == "success"
    kind, (kernel, timeout) = manager.calls[0]
    assert kind == "validate" and timeout == 15
    assert kernel.source_code == TORCH_SOURCE


async def test_get_server_stats_returns_health_and_stats(client: Client) -> None:
    result = await client.call_tool("get_server_stats", {})

    assert not result.is_error
    status = ServerStatus.model_validate(result.structured_content)
    assert status.health.device == "cpu" and status.stats.jobs_completed == 7


async def test_get_job_status_known_and_unknown(client: Client, manager: FakeJobManager) -> None:
    manager.jobs["abc"] = JobStatusResponse(
        job_id="abc", kind="evaluate", state=JobState.RUNNING, created_at=time.time()
    )

    known = await client.call_tool("get_job_status", {"job_id": "abc"})
    unknown = await client.call_tool("get_job_status", {"job_id": "nope"})

    assert not known.is_error
    assert JobStatusResponse.model_validate(known.structured_content).state is JobState.RUNNING
    assert unknown.is_error
    assert "No job with id 'nope'" in text_of(unknown)


# ---- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "names"),
    [
        ({"kernel_source": "x", "kernel_type": "fortran"}, ["kernel_type"]),
        ({"kernel_source": "x", "kernel_type": "torch", "num_trials": 0}, ["num_trials"]),
        ({"kernel_source": "", "kernel_type": "torch"}, ["kernel_source"]),
        ({"kernel_type": "torch"}, ["kernel_source"]),
        (
            {
                "kernel_source": "x",
                "kernel_type": "triton",
                "io": {"args": [{"name": "x", "type": "tensor"}]},
            },
            ["io", "needs a tensor_spec"],
        ),
        ({"kernel_source": "x", "kernel_type": "torch", "timeout": 601}, ["timeout"]),
    ],
)
async def test_bad_arguments_are_error_results_naming_the_field(
    client: Client, manager: FakeJobManager, arguments: dict[str, Any], names: list[str]
) -> None:
    result = await client.call_tool("evaluate_kernel", arguments)

    assert result.is_error
    for name in names:
        assert name in text_of(result)
    assert manager.calls == []


async def test_bad_arguments_are_worded_as_a_rest_400_without_pydantic_text(
    client: Client, manager: FakeJobManager
) -> None:
    out_of_range = await client.call_tool(
        "evaluate_kernel", {"kernel_source": "x", "kernel_type": "torch", "timeout": 601}
    )
    unknown_type = await client.call_tool(
        "validate_kernel", {"kernel_source": "x", "kernel_type": "fortran" * 100}
    )

    assert out_of_range.is_error and text_of(out_of_range) == (
        "Invalid arguments to evaluate_kernel: timeout: Input should be less than or equal to "
        "600. Nothing ran; fix them and call it again."
    )
    assert unknown_type.is_error
    assert text_of(unknown_type).startswith("Invalid arguments to validate_kernel: kernel_type: ")
    for text in (text_of(out_of_range), text_of(unknown_type)):
        assert "pydantic" not in text and "input_value" not in text and "[type=" not in text
    assert "fortranfortran" not in text_of(unknown_type)  # the value is not quoted back
    assert manager.calls == []


async def test_arguments_that_do_not_make_a_request_together_are_worded_the_same(
    client: Client, manager: FakeJobManager
) -> None:
    result = await client.call_tool("compare_kernels", {
        "ref_source": TORCH_SOURCE, "ref_type": "torch",
        "custom_source": "k", "custom_type": "triton",
    })

    assert result.is_error
    assert text_of(result).startswith(
        "Invalid arguments to compare_kernels: custom_kernel.io: kernel_type 'triton' needs an "
        "IOContract in 'io'"
    )
    assert manager.calls == []


def test_a_crash_behind_a_validation_error_is_not_the_callers_bad_argument() -> None:
    from mcp_tools.results import argument_errors

    with pytest.raises(ValidationError) as caught:
        KernelCode.model_validate({"kernel_type": "torch"})
    invalid = caught.value
    crash = UnexpectedToolError("Error executing tool evaluate_kernel")
    crash.__cause__ = invalid
    bad_argument = ToolError("Error executing tool evaluate_kernel")
    bad_argument.__cause__ = invalid

    assert argument_errors(crash) is None
    assert argument_errors(bad_argument) == invalid.errors()


async def test_job_timeout_is_an_error_result(client: Client, manager: FakeJobManager) -> None:
    manager.state = JobState.TIMED_OUT
    manager.error = "Evaluation timed out after 5 seconds"
    manager.result = KernelExecResult(outcome=Outcome.TIMEOUT, compiled=True)

    result = await client.call_tool(
        "evaluate_kernel", {"kernel_source": TORCH_SOURCE, "kernel_type": "torch", "timeout": 5}
    )

    assert result.is_error
    assert "timed out after 5 s" in text_of(result)
    assert "Evaluation timed out after 5 seconds" in text_of(result)
    assert "job-1" in text_of(result)


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("evaluate_kernel", {"kernel_source": TORCH_SOURCE, "kernel_type": "torch"}),
        ("validate_kernel", {"kernel_source": TORCH_SOURCE, "kernel_type": "torch"}),
        (
            "compare_kernels",
            {"ref_source": TORCH_SOURCE, "ref_type": "torch",
             "custom_source": TORCH_SOURCE, "custom_type": "torch"},
        ),
    ],
)
async def test_a_full_queue_is_an_error_result_and_queues_nothing(
    manager: FakeJobManager, tool: str, arguments: dict[str, Any]
) -> None:
    manager.queued = 3
    async with Client(mcp_for(manager, Settings(max_queued_jobs=3))) as client:
        result = await client.call_tool(tool, arguments)

    assert result.is_error
    assert "queue is full" in text_of(result) and "MAX_QUEUED_JOBS=3" in text_of(result)
    assert manager.calls == []


async def test_a_queue_below_its_limit_accepts_the_job(manager: FakeJobManager) -> None:
    manager.queued = 2
    async with Client(mcp_for(manager, Settings(max_queued_jobs=3))) as client:
        result = await client.call_tool(
            "evaluate_kernel", {"kernel_source": TORCH_SOURCE, "kernel_type": "torch"}
        )

    assert not result.is_error, text_of(result)
    assert len(manager.calls) == 1


async def test_a_failed_job_is_an_error_result(
    client: Client, manager: FakeJobManager
) -> None:
    manager.state = JobState.FAILED
    manager.error = "worker process lost"

    result = await client.call_tool(
        "validate_kernel", {"kernel_source": "x", "kernel_type": "torch"}
    )

    assert result.is_error
    assert "worker process lost" in text_of(result)
    assert "not a verdict on the kernel" in text_of(result)


async def test_exception_in_the_manager_is_an_error_result(
    client: Client, manager: FakeJobManager
) -> None:
    manager.fault = RuntimeError("job store is locked")

    result = await client.call_tool(
        "compare_kernels",
        {"ref_source": "x", "ref_type": "torch", "custom_source": "y", "custom_type": "torch"},
    )

    assert result.is_error
    assert "RuntimeError: job store is locked" in text_of(result)


async def test_a_job_that_never_answers_ends_in_an_error_not_a_hang(
    manager: FakeJobManager,
) -> None:
    manager.release = anyio.Event()  # never set
    server = mcp_for(manager, Settings(worker_grace_s=0.0), queue_allowance_s=0.0)

    async with Client(server) as c:
        with anyio.fail_after(10):
            result = await c.call_tool(
                "evaluate_kernel", {"kernel_source": "x", "kernel_type": "torch", "timeout": 1}
            )

    assert result.is_error
    assert "no verdict within 1 s" in text_of(result)


# ---- progress -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_progress_notifications_reach_the_client(manager: FakeJobManager, mode: str) -> None:
    manager.progress = [("queued", 0.0), ("compile", 0.2), ("compile", 0.2), ("profile", 0.7)]
    server = mcp_for(manager, Settings())
    received: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        received.append((progress, total, message))

    async with Client(server, mode=mode) as c:
        result = await c.call_tool(
            "evaluate_kernel",
            {"kernel_source": "x", "kernel_type": "torch"},
            progress_callback=on_progress,
        )

    assert not result.is_error
    assert [message for _, _, message in received] == ["queued", "compile", "compile", "profile"]
    values = [progress for progress, _, _ in received]
    assert values == sorted(values) and len(set(values)) == len(values)  # strictly increasing
    assert values[1] == pytest.approx(0.2) and values[3] == pytest.approx(0.7)
    assert all(total == 1.0 for _, total, _ in received)


async def test_heartbeat_progress_while_a_job_runs(manager: FakeJobManager) -> None:
    manager.progress = [("running", 0.3)]
    manager.release = anyio.Event()
    server = mcp_for(manager, Settings(), heartbeat_s=0.01)
    messages: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")
        if "elapsed" in (message or ""):
            assert manager.release is not None
            manager.release.set()

    async with Client(server) as c:
        with anyio.fail_after(10):
            result = await c.call_tool(
                "evaluate_kernel",
                {"kernel_source": "x", "kernel_type": "torch"},
                progress_callback=on_progress,
            )

    assert not result.is_error
    assert messages[0] == "running"
    assert any(m.startswith("running (") and m.endswith("s elapsed)") for m in messages[1:])


# ---- transport ----------------------------------------------------------------------------------


def test_transport_security_defaults_to_localhost_on_any_port() -> None:
    security = transport_security_for(Settings())

    assert security.enable_dns_rebinding_protection
    assert {"localhost", "localhost:*", "127.0.0.1:*", "[::1]:*"} <= set(security.allowed_hosts)
    assert "http://localhost:*" in security.allowed_origins
    assert not any("example" in host for host in security.allowed_hosts)


def test_transport_security_adds_configured_hosts() -> None:
    security = transport_security_for(
        Settings(mcp_allowed_hosts=("kernels.example.com", "gpu1:8443"))
    )

    assert {"kernels.example.com", "kernels.example.com:*", "gpu1:8443"} <= set(
        security.allowed_hosts
    )
    assert "gpu1:*" not in security.allowed_hosts
    assert "https://kernels.example.com" in security.allowed_origins
    assert "localhost:*" in security.allowed_hosts


def test_transport_security_explicit_origins_and_wildcard() -> None:
    explicit = transport_security_for(
        Settings(mcp_allowed_hosts=("h",), mcp_allowed_origins=("https://ui.example.com",))
    )
    assert explicit.allowed_origins == ["https://ui.example.com"]
    assert not transport_security_for(
        Settings(mcp_allowed_hosts=("*",))
    ).enable_dns_rebinding_protection


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": LATEST_HANDSHAKE_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}
MCP_HEADERS = {"accept": "application/json, text/event-stream"}


def mounted_app(manager: FakeJobManager, settings: Settings) -> FastAPI:
    server = mcp_for(manager, settings)
    holder: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with holder["mcp"]:
            yield

    app = FastAPI(lifespan=lifespan)
    holder["mcp"] = mount_mcp(app, server)
    return app


def _initialize_result(body: str) -> dict[str, Any]:
    data = [line[5:].strip() for line in body.splitlines() if line.startswith("data:")]
    return json.loads(data[-1] if data else body)["result"]


def test_mount_answers_post_mcp_directly_and_checks_the_host(manager: FakeJobManager) -> None:
    app = mounted_app(manager, Settings(mcp_allowed_hosts=("kernels.example.com",)))

    with TestClient(app, base_url="http://localhost:8000") as http:
        ok = http.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS, follow_redirects=False)
        named = http.post(
            "/mcp",
            json=INITIALIZE,
            follow_redirects=False,
            headers={**MCP_HEADERS, "host": "kernels.example.com"},
        )
        rebinding = http.post(
            "/mcp",
            json=INITIALIZE,
            follow_redirects=False,
            headers={**MCP_HEADERS, "host": "attacker.example.net"},
        )

    assert ok.status_code == 200, ok.text
    assert _initialize_result(ok.text)["serverInfo"]["name"] == "kernel-eval"
    assert named.status_code == 200
    assert rebinding.status_code == 421


def test_mcp_answers_503_outside_the_lifespan_and_survives_a_second_one(
    manager: FakeJobManager,
) -> None:
    app = mounted_app(manager, Settings())
    outside = TestClient(app, base_url="http://localhost").post(
        "/mcp", json=INITIALIZE, headers=MCP_HEADERS
    )

    for _ in range(2):  # the SDK's session manager runs once; each lifespan gets a new one
        with TestClient(app, base_url="http://localhost") as http:
            assert http.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS).status_code == 200

    assert outside.status_code == 503


# ---- compare_batch ------------------------------------------------------------------------------


def candidates(*sources: str) -> list[dict[str, Any]]:
    return [{"source_code": source, "kernel_type": "torch"} for source in sources]


def batch_arguments(*sources: str, **extra: Any) -> dict[str, Any]:
    return {"ref_source": TORCH_SOURCE, "ref_type": "torch",
            "custom_kernels": candidates(*sources), **extra}


async def test_compare_batch_answers_every_candidate_in_order_with_the_summary(
    client: Client, manager: FakeJobManager
) -> None:
    wrong = KernelExecResult(outcome=Outcome.INCORRECT, compiled=True, correctness=False,
                             validation_error="max abs diff 0.5 at index 3")
    late = KernelExecResult(outcome=Outcome.TIMEOUT, compiled=True)
    manager.by_source = {"b": (JobState.COMPLETED, wrong), "c": (JobState.TIMED_OUT, late)}

    result = await client.call_tool(
        "compare_batch", batch_arguments("a", "b", "c", num_trials=7, timeout=9)
    )

    assert not result.is_error, text_of(result)
    answered = BatchResults.model_validate(result.structured_content)
    assert [r.index for r in answered.results] == [0, 1, 2]
    assert [r.verdict for r in answered.results] == ["success", "incorrect", "timeout"]
    assert answered.results[2].state is JobState.TIMED_OUT
    assert answered.count == 3 and answered.unfinished_job_ids == []
    assert {k: v for k, v in answered.summary.items() if v} == {
        "success": 1, "incorrect": 1, "timeout": 1,
    }
    text = text_of(result)
    assert "at index 3" in text  # a failing candidate's message in full
    assert "Candidate #2: Job batch-job-3 timed out after 9 s" in text
    requests = [request for kind, request in manager.calls]
    assert [r.custom_kernel.source_code for r in requests] == ["a", "b", "c"]
    assert all(r.num_trials == 7 and r.ref_kernel.source_code == TORCH_SOURCE for r in requests)


async def test_compare_batch_reports_each_finished_candidate_as_progress(
    manager: FakeJobManager,
) -> None:
    received: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        received.append((progress, message))

    async with Client(mcp_for(manager, Settings())) as c:
        result = await c.call_tool(
            "compare_batch", batch_arguments("a", "b", "c"), progress_callback=on_progress
        )

    assert not result.is_error, text_of(result)
    finished = [(value, message or "") for value, message in received if "done" in (message or "")]
    assert [m.split(":")[0] for _, m in finished] == ["1/3 done", "2/3 done", "3/3 done"]
    assert all("success" in m for _, m in finished)
    values = [value for value, _ in received]
    assert values == sorted(values) and values[-1] == pytest.approx(1.0)


async def test_compare_batch_refuses_a_batch_that_would_overfill_the_queue(
    manager: FakeJobManager,
) -> None:
    manager.queued = 1
    async with Client(mcp_for(manager, Settings(max_queued_jobs=3))) as c:
        refused = await c.call_tool("compare_batch", batch_arguments("a", "b", "c"))
        assert manager.calls == [] and manager.started == 0
        accepted = await c.call_tool("compare_batch", batch_arguments("a", "b"))

    assert refused.is_error
    assert "queue is full" in text_of(refused) and "batch of 3" in text_of(refused)
    assert not accepted.is_error and manager.started == 2
    assert len(manager.batch_ids) == 1 and None not in manager.batch_ids  # one batch


async def test_compare_batch_names_the_candidate_a_bad_argument_is_in(
    client: Client, manager: FakeJobManager
) -> None:
    arguments = batch_arguments("a")
    arguments["custom_kernels"].append({"source_code": "k", "kernel_type": "triton"})

    result = await client.call_tool("compare_batch", arguments)

    assert result.is_error
    assert text_of(result).startswith("Invalid arguments to compare_batch: custom_kernels.1.io: ")
    assert manager.started == 0


async def test_compare_batch_that_never_finishes_ends_in_an_error_naming_the_jobs(
    manager: FakeJobManager,
) -> None:
    manager.release = anyio.Event()  # never set
    server = mcp_for(manager, Settings(worker_grace_s=0.0), queue_allowance_s=0.0)

    async with Client(server) as c:
        with anyio.fail_after(10):
            result = await c.call_tool("compare_batch", batch_arguments("a", timeout=1))

    assert result.is_error
    assert "no verdict for 1 of 1 candidates" in text_of(result)
    assert BatchResults.model_validate(result.structured_content).unfinished_job_ids == [
        "batch-job-1"
    ]
