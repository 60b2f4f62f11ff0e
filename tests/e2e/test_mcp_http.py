"""MCP over Streamable HTTP at /mcp of the real server, with the SDK's real HTTP client."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from mcp.client import Client
from mcp_types import CallToolResult
from mcp_types.version import LATEST_HANDSHAKE_VERSION

from shared.models import CompareResponse, EvaluationResponse, Outcome

from ..conftest import Server

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

SOURCE = (
    "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2"
)
IO = {
    "args": [
        {
            "name": "x",
            "type": "tensor",
            "role": "input",
            "tensor_spec": {
                "shape": [256],
                "dtype": "float32",
                "init": {"kind": "randn", "seed": 7},
            },
        }
    ]
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def structured(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None, result
    return result.structured_content


def text_of(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


TOOL_NAMES = {
    "evaluate_kernel",
    "compare_kernels",
    "compare_batch",
    "validate_kernel",
    "get_server_stats",
    "get_job_status",
}


async def test_lists_the_tools(live_server: Server) -> None:
    async with Client(f"{live_server.url}/mcp") as client:
        tools = (await client.list_tools()).tools

    assert {tool.name for tool in tools} == TOOL_NAMES
    assert all(tool.output_schema for tool in tools)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_evaluate_kernel_with_progress(live_server: Server, mode: str) -> None:
    received: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        received.append((progress, message))

    async with Client(f"{live_server.url}/mcp", mode=mode) as client:
        result = await client.call_tool(
            "evaluate_kernel",
            {"kernel_source": SOURCE, "kernel_type": "torch", "io": IO, "num_trials": 20},
            progress_callback=on_progress,
        )
        status = await client.call_tool("get_job_status", {"job_id": structured(result)["job_id"]})

    assert not result.is_error, text_of(result)
    response = EvaluationResponse.model_validate(result.structured_content)
    assert response.kernel_exec_result is not None
    assert response.kernel_exec_result.outcome is Outcome.SUCCESS
    assert response.kernel_exec_result.runtime_stats is not None
    assert response.kernel_exec_result.runtime_stats.num_samples >= 20
    assert received and received[0][1] == "queued"
    values = [value for value, _ in received]
    assert values == sorted(values)
    assert not status.is_error and structured(status)["state"] == "completed"


async def test_compare_and_kernel_failures_are_results(live_server: Server) -> None:
    custom = SOURCE.replace("x * 2", "x + x")
    async with Client(f"{live_server.url}/mcp") as client:
        compared = await client.call_tool(
            "compare_kernels",
            {"ref_source": SOURCE, "ref_type": "torch", "custom_source": custom,
             "custom_type": "torch", "ref_io": IO, "custom_io": IO, "num_trials": 10},
        )  # fmt: skip
        broken = await client.call_tool(
            "validate_kernel", {"kernel_source": "def (", "kernel_type": "torch"}
        )
        bad_argument = await client.call_tool(
            "evaluate_kernel", {"kernel_source": SOURCE, "kernel_type": "fortran"}
        )

    assert not compared.is_error, text_of(compared)
    response = CompareResponse.model_validate(compared.structured_content)
    assert response.kernel_exec_result is not None and response.kernel_exec_result.correctness
    assert "speedup" in text_of(compared)
    assert not broken.is_error
    assert structured(broken)["kernel_exec_result"]["outcome"] == "compile_error"
    assert "SyntaxError" in text_of(broken)
    assert bad_argument.is_error and "kernel_type" in text_of(bad_argument)


def test_post_mcp_is_not_redirected_and_foreign_hosts_are_refused(live_server: Server) -> None:
    initialize: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": LATEST_HANDSHAKE_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "e2e", "version": "0"},
        },
    }
    headers = {"accept": "application/json, text/event-stream"}

    ok = httpx.post(f"{live_server.url}/mcp", json=initialize, headers=headers)
    foreign = httpx.post(
        f"{live_server.url}/mcp", json=initialize, headers={**headers, "host": "evil.example"}
    )

    assert ok.status_code == 200 and "kernel-eval" in ok.text
    assert foreign.status_code == 421


async def test_mcp_only_mode_serves_the_tools_and_no_rest_routes_but_health(
    server_factory: Callable[..., Server],
) -> None:
    server = server_factory(SERVER_MODE="mcp")
    async with Client(f"{server.url}/mcp") as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        validated = await client.call_tool(
            "validate_kernel", {"kernel_source": SOURCE, "kernel_type": "torch", "io": IO}
        )
        job_id = structured(validated)["job_id"]
        status = await client.call_tool("get_job_status", {"job_id": job_id})

    assert tools == TOOL_NAMES
    assert not validated.is_error, text_of(validated)
    assert structured(validated)["kernel_exec_result"]["outcome"] == "success"
    assert structured(status)["state"] == "completed"
    with httpx.Client(base_url=server.url) as http:
        assert http.get("/health").json()["device"] in ("cpu", "cuda")
        assert set(http.get("/openapi.json").json()["paths"]) == {"/health", "/metrics"}
        for method, path in [("POST", "/evaluate"), ("POST", "/compare"),
                             ("POST", "/compare/batch"), ("POST", "/validate"), ("POST", "/"),
                             ("GET", "/job/x"), ("GET", "/stats")]:
            answer = http.request(method, path, json={})
            assert answer.status_code in (404, 405), (method, path)
            assert answer.json()["detail"] in ("Not Found", "Method Not Allowed"), (method, path)
