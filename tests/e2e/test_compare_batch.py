"""POST /compare/batch on the real server (real workers; CPU mode in CI), and its client, CLI
and MCP counterparts."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from kernel_eval_client import (
    AsyncKernelEvalClient,
    KernelCode,
    KernelEvalClient,
    ServerBusyError,
)
from mcp.client import Client

from shared.models import CompareBatchResult, CompareBatchSummary, JobState
from tests.conftest import ROOT, Server

pytestmark = pytest.mark.e2e

REF = "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
FAST = "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x + x\n"
# Slow to load (the sleep runs at import, in the worker): its job ends well after FAST's.
SLOW = "import time\ntime.sleep(3)\n" + FAST
WRONG = "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
BROKEN = "def (\n"
IO = {
    "args": [
        {
            "name": "x", "type": "tensor", "role": "input",
            "tensor_spec": {"shape": [256], "dtype": "float32",
                            "init": {"kind": "randn", "seed": 5}},
        }
    ]
}  # fmt: skip
PARAMS = {"num_trials": 5, "num_correct_trials": 2}


def kernel(source: str) -> dict[str, Any]:
    return {"source_code": source, "kernel_type": "torch", "io": IO}


def batch(*sources: str) -> dict[str, Any]:
    return {"ref_kernel": kernel(REF), "custom_kernels": [kernel(s) for s in sources], **PARAMS}


def reference_hits(http: httpx.Client) -> int:
    return int(http.get("/stats").json()["cache"].get("reference", {}).get("hits", 0))


def test_answers_stream_as_they_finish_with_a_verdict_each_and_a_summary(
    client: httpx.Client,
) -> None:
    hits_before = reference_hits(client)

    with client.stream("POST", "/compare/batch", json=batch(SLOW, FAST, WRONG, BROKEN)) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"] == "application/x-ndjson"
        lines = [json.loads(text) for text in r.iter_lines() if text]

    results = [CompareBatchResult.model_validate(line) for line in lines[:-1]]
    summary = CompareBatchSummary.model_validate(lines[-1])
    arrival = [result.index for result in results]
    assert sorted(arrival) == [0, 1, 2, 3]
    assert arrival.index(1) < arrival.index(0)  # the fast candidate did not wait for the slow
    verdicts = {result.index: result.verdict for result in results}
    assert verdicts == {0: "success", 1: "success", 2: "incorrect", 3: "compile_error"}
    assert all(r.state is JobState.COMPLETED and r.status_code == 200 for r in results)
    broken = next(r for r in results if r.index == 3).response.kernel_exec_result
    assert broken is not None and "SyntaxError" in (broken.compilation_error or "")
    assert summary.count == 4
    assert {k: v for k, v in summary.summary.items() if v} == {
        "success": 2, "incorrect": 1, "compile_error": 1,
    }
    for result in results:  # each an ordinary /compare job
        stored = client.get(f"/job/{result.job_id}").json()
        assert (stored["kind"], stored["state"]) == ("compare", "completed")
    # The candidates after the first ones found the reference's run in the cache.
    assert reference_hits(client) > hits_before


def test_a_batch_ranks_every_candidate_against_one_reference_figure(client: httpx.Client) -> None:
    """Identical candidates sent together: the reference is timed once, every answer carries
    that one figure, and all but the first say they reused it."""
    fresh = f"# {uuid.uuid4().hex}: a reference no earlier test recorded\n"
    body = {"ref_kernel": kernel(fresh + REF.replace("x * 2", "x * 3")),
            "custom_kernels": [kernel(FAST.replace("x + x", "x * 3"))] * 4, **PARAMS}
    with client.stream("POST", "/compare/batch", json=body) as r:
        assert r.status_code == 200, r.read()
        lines = [json.loads(text) for text in r.iter_lines() if text]
    results = [CompareBatchResult.model_validate(line) for line in lines[:-1]]
    assert len(results) == 4 and all(r.verdict == "success" for r in results)
    figures, reused = set(), []
    for result in results:
        ref = result.response.ref_exec_result
        assert ref is not None and ref.runtime is not None
        figures.add(ref.runtime)
        mine = result.response.kernel_exec_result
        assert mine is not None
        reused.append(bool(mine.metadata.get("reference_reused")))
    assert len(figures) == 1, figures
    assert sorted(reused) == [False, True, True, True], reused


def test_a_batch_that_measures_its_reference_afresh_still_has_one_figure(
        client: httpx.Client) -> None:
    """``reuse_reference: false``: the batch takes its own figure, once, for all candidates."""
    body = {"ref_kernel": kernel(REF.replace("x * 2", "x * 4")),
            "custom_kernels": [kernel(FAST.replace("x + x", "x * 4"))] * 3,
            **PARAMS, "reuse_reference": False}
    with client.stream("POST", "/compare/batch", json=body) as r:
        assert r.status_code == 200, r.read()
        lines = [json.loads(text) for text in r.iter_lines() if text]
    results = [CompareBatchResult.model_validate(line) for line in lines[:-1]]
    assert len(results) == 3 and all(r.verdict == "success" for r in results)
    figures = {r.response.ref_exec_result.runtime for r in results  # type: ignore[union-attr]
               }
    assert len(figures) == 1, figures


def test_a_batch_that_would_pass_the_queue_limit_gets_429_and_runs_nothing(
    server_factory: Callable[..., Server],
) -> None:
    server = server_factory(MAX_QUEUED_JOBS="2")
    with httpx.Client(base_url=server.url, timeout=60) as http:
        refused = http.post("/compare/batch", json=batch(FAST, FAST, FAST))
        stats = http.get("/stats").json()
    with KernelEvalClient(server.url, busy_retries=0) as client, pytest.raises(ServerBusyError):
        list(client.compare_batch(KernelCode.model_validate(kernel(REF)),
                                  [KernelCode.model_validate(kernel(FAST))] * 3))

    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) > 0
    assert "MAX_QUEUED_JOBS=2" in refused.json()["detail"]
    assert (stats["jobs_queued"], stats["jobs_running"], stats["jobs_completed"]) == (0, 0, 0)


def test_the_sync_client_yields_each_result(live_server: Server) -> None:
    ref = KernelCode.model_validate(kernel(REF))
    candidates = [KernelCode.model_validate(kernel(s)) for s in (FAST, WRONG)]

    with KernelEvalClient(live_server.url) as client:
        results = list(client.compare_batch(ref, candidates, **PARAMS))

    assert sorted((r.index, r.verdict) for r in results) == [(0, "success"), (1, "incorrect")]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_the_async_client_yields_each_result(live_server: Server) -> None:
    ref = KernelCode.model_validate(kernel(REF))
    candidates = [KernelCode.model_validate(kernel(s)) for s in (BROKEN, FAST)]

    async with AsyncKernelEvalClient(live_server.url) as client:
        results = [r async for r in client.compare_batch(ref, candidates, **PARAMS)]

    assert sorted((r.index, r.verdict) for r in results) == [(0, "compile_error"), (1, "success")]


def test_the_cli_prints_a_line_per_candidate_and_a_table(
    live_server: Server, tmp_path: Path
) -> None:
    (tmp_path / "ref.py").write_text(REF + "def get_inputs():\n    return [torch.randn(64)]\n")
    candidates = tmp_path / "candidates"
    candidates.mkdir()
    (candidates / "good.py").write_text(FAST)
    (candidates / "wrong.py").write_text(WRONG)

    done = subprocess.run(
        [sys.executable, "-m", "kernel_eval_client.cli", "compare-batch", "--ref",
         str(tmp_path / "ref.py"), "--custom", str(candidates), "--server", live_server.url,
         "--trials", "5", "--correct-trials", "2"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
    )

    assert done.returncode == 1, done.stdout + done.stderr  # one candidate is wrong
    lines = done.stdout.splitlines()
    assert {line.split()[0] for line in lines[:2]} == {"[1/2]", "[2/2]"}
    assert any("wrong.py  incorrect" in line for line in lines[:2])
    assert lines[-1] == "2 candidates: 1 success, 1 incorrect"


@pytest.mark.anyio
async def test_the_mcp_tool_returns_every_result_with_progress(live_server: Server) -> None:
    messages: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    async with Client(f"{live_server.url}/mcp") as client:
        result = await client.call_tool(
            "compare_batch",
            {"ref_source": REF, "ref_type": "torch", "ref_io": IO,
             "custom_kernels": [kernel(FAST), kernel(WRONG)], **PARAMS},
            progress_callback=on_progress,
        )

    assert not result.is_error, result.content
    assert result.structured_content is not None
    answered = result.structured_content["results"]
    assert [(r["index"], r["response"]["kernel_exec_result"]["outcome"]) for r in answered] == [
        (0, "success"), (1, "incorrect"),
    ]
    assert sum("done: candidate" in message for message in messages) == 2
