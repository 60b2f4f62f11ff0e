"""Running unattended, against the real server: capped worker output, Prometheus metrics,
JSON logs, the bounded queue with the client's retries, and the API key (REST and MCP)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from kernel_eval_client import (
    AuthenticationError,
    KernelCode,
    KernelEvalClient,
    Outcome,
)
from mcp.client import Client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from prometheus_client.parser import text_string_to_metric_families

from orchestration.output_capture import DEFAULT_HEAD_BYTES, DEFAULT_TAIL_BYTES

from ..conftest import Server

pytestmark = pytest.mark.e2e

X_IO = {"args": [{"name": "x", "type": "tensor", "role": "input",
                  "tensor_spec": {"shape": [1024], "init": {"kind": "randn", "seed": 1}}}]}
DOUBLE = (
    "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
    "        return x * 2\n"
)
# The kernel of the issue: it prints 100 MB in 500 KB lines, then works.
FLOOD = (
    "import sys\nimport torch\n"
    "_line = 'y' * (500 * 1024 - 1) + '\\n'\n"
    "for _ in range(200):\n    sys.stdout.write(_line)\nsys.stdout.flush()\n"
    "print('the last line')\n"
) + DOUBLE.split("\n", 1)[1]
SLEEPER = (
    "import time\nimport torch\nclass Model(torch.nn.Module):\n"
    "    def forward(self, x):\n        time.sleep(3600)\n        return x\n"
)
KEY = "e2e-secret"


def kernel(source: str) -> dict[str, object]:
    return {"source_code": source, "kernel_type": "torch", "io": X_IO}


def wait_for_state(
    client: httpx.Client, job_id: str, done: Callable[[str], bool], deadline_s: float = 120
) -> str:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        state = client.get(f"/job/{job_id}").json()["state"]
        if done(state):
            return state
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} is still {state} after {deadline_s} s")


def job_log(client: httpx.Client, job_id: str, deadline_s: float = 30) -> httpx.Response:
    """The job's log once it is there (it is saved a moment after the answer)."""
    end = time.monotonic() + deadline_s
    while True:
        log = client.get(f"/job/{job_id}/log")
        assert log.status_code == 200
        if log.content or time.monotonic() > end:
            return log
        time.sleep(0.1)


def final(state: str) -> bool:
    return state in ("completed", "timed_out", "failed")


def samples(client: httpx.Client) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = client.get("/metrics").text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(seen: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
          **labels: str) -> float:
    return seen.get((name, frozenset(labels.items())), 0.0)


# ---- output --------------------------------------------------------------------------------------


def test_a_kernel_printing_100_mb_succeeds_with_its_output_capped(client: httpx.Client) -> None:
    # A worker blocked on its own output would run into the timeout (408) instead.
    r = client.post("/evaluate", json={"kernel": kernel(FLOOD), "num_trials": 3, "timeout": 60})
    assert r.status_code == 200, r.text[:2000]
    assert r.json()["kernel_exec_result"]["outcome"] == "success"

    log = job_log(client, r.json()["job_id"])
    assert len(log.content) <= DEFAULT_HEAD_BYTES + DEFAULT_TAIL_BYTES + 100
    assert log.text.startswith("y" * 1000)
    assert "bytes omitted ...]" in log.text
    assert "the last line" in log.text[-DEFAULT_TAIL_BYTES:]


# ---- metrics -------------------------------------------------------------------------------------


def test_metrics_count_a_finished_job_by_kind_and_outcome(client: httpx.Client) -> None:
    before = samples(client)
    r = client.post("/validate", json={"kernel": kernel(DOUBLE)})
    assert r.status_code == 200, r.text
    after = samples(client)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("kernel_eval_jobs_queued_total", kind="validate") >= 1
    assert moved("kernel_eval_jobs_total", kind="validate", outcome="success") >= 1
    stage_counts = [
        v - before.get(key, 0.0) for key, v in after.items()
        if key[0] == "kernel_eval_stage_duration_seconds_count"
    ]  # fmt: skip
    assert stage_counts and max(stage_counts) >= 1
    assert ("kernel_eval_queue_length", frozenset()) in after


# ---- logs ----------------------------------------------------------------------------------------


def test_log_format_json_makes_every_server_log_line_a_json_object(
    server_factory: Callable[..., Server], tmp_path: Path
) -> None:
    server = server_factory(tmp_path / "state", LOG_FORMAT="json")
    with httpx.Client(base_url=server.url, timeout=120) as c:
        job_id = c.post("/validate", json={"kernel": kernel(DOUBLE)}).json()["job_id"]
    server.stop()

    lines = [line for line in server.log().splitlines() if line.strip()]
    entries = [json.loads(line) for line in lines]  # raises on any line that is not JSON
    events = [e for e in entries if e.get("job_id") == job_id]
    assert [e["event"] for e in events][:1] == ["queued"]
    assert events[-1]["event"] == "finished" and events[-1]["outcome"] == "success"
    assert any(e["logger"].startswith("uvicorn") for e in entries)


# ---- the bounded queue ---------------------------------------------------------------------------


def test_a_full_queue_answers_429_and_the_client_retries_until_it_is_accepted(
    server_factory: Callable[..., Server], tmp_path: Path
) -> None:
    server = server_factory(tmp_path / "state", MAX_WORKERS="1", MAX_QUEUED_JOBS="1")
    with httpx.Client(base_url=server.url, timeout=120) as c:
        sleeper = {"kernel": kernel(SLEEPER), "num_trials": 1, "timeout": 4}
        running = c.post("/evaluate", params={"wait": "false"}, json=sleeper).json()["job_id"]
        wait_for_state(c, running, lambda s: s != "queued")
        queued = c.post("/evaluate", params={"wait": "false"}, json=sleeper)
        assert queued.status_code == 202

        refused = c.post("/validate", json={"kernel": kernel(DOUBLE)})

        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) > 0
        assert "MAX_QUEUED_JOBS=1" in refused.json()["detail"]
        # The client waits as Retry-After says until the queue has room.
        with KernelEvalClient(server.url) as client:
            result = client.validate(KernelCode.model_validate(kernel(DOUBLE)), timeout=30)
        assert result.kernel_exec_result is not None
        assert result.kernel_exec_result.outcome is Outcome.SUCCESS
        for job_id in (running, queued.json()["job_id"]):
            assert wait_for_state(c, job_id, final) == "timed_out"


# ---- the API key ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_api_key_guards_rest_and_mcp_but_not_health(
    server_factory: Callable[..., Server], tmp_path: Path
) -> None:
    server = server_factory(tmp_path / "state", API_KEY=KEY)
    async with httpx.AsyncClient(base_url=server.url) as c:
        assert (await c.get("/health")).status_code == 200
        assert (await c.get("/stats")).status_code == 401
        assert (await c.get("/metrics")).status_code == 401
        assert (await c.post("/mcp", json={})).status_code == 401
    with pytest.raises(AuthenticationError):
        KernelEvalClient(server.url).stats()
    with KernelEvalClient(server.url, api_key=KEY) as client:
        assert client.stats().worker_slots >= 1

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {KEY}"})
    async with Client(streamable_http_client(f"{server.url}/mcp", http_client=http)) as mcp:
        tools = (await mcp.list_tools()).tools
    assert "evaluate_kernel" in {tool.name for tool in tools}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_device_metrics_asked_of_a_cpu_server_say_why_there_are_none(
        client: httpx.Client) -> None:
    """Issue 23: the answer said nothing (``device_metrics`` null) where metrics cannot be had."""
    if client.get("/health").json()["device"] != "cpu":
        pytest.skip("the subject is a CPU-mode server")
    body = {"kernel": kernel(DOUBLE), "enable_device_metrics": True, "num_trials": 3}
    metrics = client.post("/evaluate", json=body).json()["kernel_exec_result"]["metadata"][
        "device_metrics"]
    assert metrics["available"] is False and "CPU mode" in metrics["reason"], metrics
    broken = {**body, "kernel": kernel(DOUBLE.replace("x * 2", "x.no_such_method()"))}
    metrics = client.post("/evaluate", json=broken).json()["kernel_exec_result"]["metadata"][
        "device_metrics"]
    assert metrics["available"] is False and "did not succeed" in metrics["reason"], metrics
