"""Every request and client example of the seeds, run verbatim against the real server.

The examples (``seed_examples.EXAMPLES``, copied character for character from
``../shared/seeds/``) are run as their readers would run them: curl through bash, Python
snippets with ``exec`` (those that continue an earlier snippet find ``requests`` imported, as
the page's first snippet left it), command lines through bash with a ``python`` on PATH. The
only change is the address: ``http://localhost:8000`` becomes the test server's, and a
command line's port 8000 a free one. Each answer is checked against what the seeds document:
the documented response blocks are parsed, and every key they show must be in the real answer
with a value of the same JSON type.

Deviations that remain are listed, with their reasons, in docs/SEEDS_COMPAT.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
from kernel_eval_client import IOContract, KernelMetadata, LaunchConfig, TensorSpec
from kernel_eval_client._request_model import RequestModel

from tests.conftest import ROOT, Server, cuda_available, free_port

from .seed_examples import EXAMPLES, NOT_RUN, SEED_FILES, SEEDS_DIR

pytestmark = pytest.mark.e2e

SEED_URL = "http://localhost:8000"
START_DEADLINE_S = 120
CURL_TIMEOUT_S = 300
# Values the seeds show for a GPU server that a CPU-mode server leaves empty.
CPU_NULLS = {"gpu_id", "gpu_type", "device_metrics"}


# ---- running an example ----------------------------------------------------------------------


def localized(text: str, server: Server | None) -> str:
    return text if server is None else text.replace(SEED_URL, server.url)


def run_python(key: str, server: Server | None, text: str | None = None) -> dict[str, Any]:
    """Execute example ``key`` (or a verbatim prefix of it); return its namespace."""
    source = localized(EXAMPLES[key] if text is None else text, server)
    namespace: dict[str, Any] = {"__name__": f"seed_example_{key}", "requests": requests}
    exec(compile(source, f"<seed example {key}>", "exec"), namespace)  # noqa: S102
    return namespace


def prefix_before(key: str, marker: str) -> str:
    """The example's text up to (not including) the line that starts with ``marker``."""
    text = EXAMPLES[key]
    at = text.index("\n" + marker) + 1
    return text[:at]


def run_curl(key: str, server: Server, text: str | None = None) -> Any:
    done = subprocess.run(
        ["bash", "-c", localized(EXAMPLES[key] if text is None else text, server)],
        capture_output=True, text=True, timeout=CURL_TIMEOUT_S, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


_JSON_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*|#[^\n]*')


def documented(key: str) -> Any:
    """A documented response block as data: JSON once its ``//`` and ``#`` comments are gone."""
    return json.loads(
        _JSON_TOKEN.sub(lambda m: m[0] if m[0].startswith('"') else "", EXAMPLES[key])
    )


def fragment(key: str) -> dict[str, Any]:
    """A block that is a fragment of a request (``"io": {...}``), as the dict it belongs in."""
    return eval("{" + EXAMPLES[key] + "}", {"str": str, "bool": bool})


def assert_documented_shape(
    actual: Any, doc: Any, nullable: Collection[str] = (), at: str = ""
) -> None:
    """Every key ``doc`` shows is in ``actual``, with a value of the same JSON type.

    A key in ``nullable`` may be null in ``actual`` (e.g. ``correctness`` of an /evaluate).
    """
    if isinstance(doc, dict):
        assert isinstance(actual, dict), f"{at or 'answer'}: expected an object, got {actual!r}"
        for key, value in doc.items():
            path = f"{at}.{key}" if at else key
            assert key in actual, f"{path} is documented but missing from {sorted(actual)}"
            if actual[key] is None and (value is None or key in nullable):
                continue
            assert_documented_shape(actual[key], value, nullable, path)
    elif isinstance(doc, bool):
        assert isinstance(actual, bool), f"{at}: expected a boolean, got {actual!r}"
    elif isinstance(doc, (int, float)):
        assert isinstance(actual, (int, float)) and not isinstance(actual, bool), (
            f"{at}: {actual!r}"
        )
    elif isinstance(doc, str):
        assert isinstance(actual, str), f"{at}: expected a string, got {actual!r}"
    elif isinstance(doc, list):
        assert isinstance(actual, list), f"{at}: expected a list, got {actual!r}"


def cpu_nulls() -> set[str]:
    return set() if cuda_available() else CPU_NULLS


# ---- the tables match the seeds --------------------------------------------------------------


def seed_blocks() -> dict[str, str]:
    blocks = {}
    for key, name in SEED_FILES.items():
        text = (SEEDS_DIR / name).read_text()
        for i, body in enumerate(re.findall(r"^```\w*\n(.*?)^```", text, re.MULTILINE | re.DOTALL)):
            blocks[f"{key}.{i}"] = body
    return blocks


@pytest.mark.skipif(not SEEDS_DIR.is_dir(), reason="the seeds are not beside this checkout")
def test_every_code_block_of_the_seeds_is_run_verbatim_or_excused() -> None:
    blocks = seed_blocks()
    assert set(EXAMPLES) | set(NOT_RUN) == set(blocks)
    assert not set(EXAMPLES) & set(NOT_RUN)
    changed = [key for key, text in EXAMPLES.items() if text != blocks[key]]
    assert changed == []


# ---- starting the server ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def python_on_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PATH whose ``python`` is this interpreter (the seeds' command lines say ``python``)."""
    bin_dir = tmp_path_factory.mktemp("bin")
    wrapper = bin_dir / "python"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


@contextlib.contextmanager
def started(line: str, state_dir: Path, path: str) -> Iterator[Server]:
    """Run command ``line`` (its port 8000 made a free one) until it serves /health."""
    port = free_port()
    env = dict(os.environ)
    env.update(
        PATH=path, PORT=str(port), JOB_STORE_PATH=str(state_dir / "jobs.sqlite3"),
        JOB_DIR=str(state_dir / "jobs"), CACHE_DIR=str(state_dir / "cache"),
        PYTHONUNBUFFERED="1",
    )  # fmt: skip
    if not cuda_available():
        env["DEVICE"] = "cpu"
    state_dir.mkdir(parents=True, exist_ok=True)
    log_path = state_dir / "server.log"
    proc = subprocess.Popen(
        ["bash", "-c", line.replace("--port 8000", f"--port {port}")],
        cwd=ROOT, env=env, stdout=log_path.open("wb"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    server = Server(f"http://127.0.0.1:{port}", proc, log_path)
    try:
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            assert proc.poll() is None, f"{line!r} exited with {proc.returncode}:\n{server.log()}"
            assert time.monotonic() < deadline, f"{line!r} did not serve /health:\n{server.log()}"
            try:
                if httpx.get(f"{server.url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        yield server
    finally:
        server.stop(signal.SIGKILL)


# The command lines of 000.0, 000.4, 000.15, 000.12 (= 001.16) and 001.15. Not run: the Docker
# line of 000.0 (see NOT_RUN 000.3) and 001.15's `tail -f logs/cuda_eval_server.log` (this
# server logs to its standard error; docs/SEEDS_COMPAT.md).
COMMAND_LINES = [
    ("000.0", "python main.py --host 0.0.0.0 --port 8000"),
    ("000.4", "python main.py --host 0.0.0.0 --port 8000 --log-level info"),
    ("000.15", "python main.py --host 0.0.0.0 --port 8000 --log-level DEBUG --mode both"),
    ("000.12", "ENABLE_DEVICE_METRICS=true python main.py"),
    ("001.15", "LOG_LEVEL=DEBUG python main.py"),
]


@pytest.mark.parametrize(("key", "line"), COMMAND_LINES, ids=[k for k, _ in COMMAND_LINES])
def test_documented_command_lines_start_the_server(
    key: str, line: str, tmp_path: Path, python_on_path: str
) -> None:
    assert line in EXAMPLES[key]
    with started(line, tmp_path, python_on_path) as server:
        health = httpx.get(f"{server.url}/health").json()
        assert health["status"] == "healthy"
        assert health["device_metrics_enabled"] is ("ENABLE_DEVICE_METRICS=true" in line)
        paths = httpx.get(f"{server.url}/openapi.json").json()["paths"]
        assert "/evaluate" in paths and "/compare" in paths
        # --mode both (and the default) serve MCP on the same port
        probe = httpx.post(f"{server.url}/mcp", json={}, headers={"accept": "application/json"})
        assert probe.status_code != 404
        if "DEBUG" in line:
            assert " DEBUG " in server.log()


# ---- health, jobs, stats, clean-up -----------------------------------------------------------


@pytest.mark.parametrize("key", ["000.5", "001.11"])
def test_curl_health_gives_the_documented_fields(key: str, live_server: Server) -> None:
    health = run_curl(key, live_server)
    assert_documented_shape(health, documented("004.29"))
    assert health["status"] == "healthy"
    assert health["gpu_available"] is cuda_available()


@pytest.mark.gpu
def test_health_on_a_gpu_host_is_the_expected_answer_of_the_readme(live_server: Server) -> None:
    # 001.0: `# Expected: {"status": "healthy", "gpu_available": true, "gpu_count": 1}`
    health = run_curl("001.11", live_server)
    assert health["status"] == "healthy" and health["gpu_available"] is True
    assert health["gpu_count"] >= 1


def test_curl_job_stats_and_cleanup(live_server: Server, client: httpx.Client) -> None:
    job_id = run_curl("004.0", live_server)["job_id"]
    # `{job_id}` is the page's placeholder for an id an earlier answer gave
    status = run_curl("001.12", live_server, EXAMPLES["001.12"].replace("{job_id}", job_id))
    assert status["job_id"] == job_id and status["state"] == "completed"
    assert status["result"]["kernel_exec_result"]["compiled"] is True
    stats = run_curl("001.13", live_server)
    assert_documented_shape(stats, documented("004.30"))
    assert stats["jobs_completed"] >= 1
    cleaned = run_curl("001.14", live_server)
    assert cleaned["removed_jobs"] == 0  # the default keeps jobs younger than 24 h
    assert client.get(f"/job/{job_id}").status_code == 200


# ---- torch kernels: /evaluate and /compare ---------------------------------------------------


def test_readme_first_request_gets_the_expected_response(live_server: Server) -> None:
    body = run_curl("001.2", live_server)
    assert_documented_shape(body, documented("001.3"))
    result = body["kernel_exec_result"]
    assert body["status"] == "success" and result["compiled"] is True
    assert result["runtime"] == result["runtime_stats"]["mean"] > 0
    assert body["warnings"] == []


def test_api_guide_curl_evaluate_gets_a_success_response(live_server: Server) -> None:
    body = run_curl("004.0", live_server)
    assert_documented_shape(body, documented("004.11"))
    assert_documented_shape(body, documented("004.10"), nullable={"correctness"} | cpu_nulls())
    assert body["status"] == "success" and body["kernel_exec_result"]["runtime"] > 0
    assert body["kernel_exec_result"]["correctness"] is None  # "(comparison only)"


def test_api_guide_curl_compare_of_equal_kernels_is_correct(live_server: Server) -> None:
    body = run_curl("004.1", live_server)
    result = body["kernel_exec_result"]
    assert result["correctness"] is True and result["runtime"] > 0
    assert body["ref_runtime"]["mean"] > 0
    # the README's "Understanding Responses" block, on a comparison that passed
    assert_documented_shape(body, documented("001.7"))
    assert_documented_shape(body, documented("004.10"), nullable=cpu_nulls())


def test_readme_requests_evaluate_prints_the_runtime(
    live_server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    namespace = run_python("001.5", live_server)
    assert namespace["response"].status_code == 200
    assert namespace["result"]["kernel_exec_result"]["compiled"] is True
    runtime = namespace["result"]["kernel_exec_result"]["runtime"]
    assert capsys.readouterr().out == f"Runtime: {runtime}ms\n" and runtime > 0


def test_readme_compare_with_an_undefined_custom_kernel_prints_no_speedup(
    live_server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    # The custom side calls an undefined `custom_matmul` (and is torch_cuda: a GPU type).
    namespace = run_python("001.6", live_server)
    assert namespace["response"].status_code == 200
    result = namespace["result"]
    assert result["ref_runtime"]["mean"] > 0
    assert result["kernel_exec_result"]["correctness"] is not True
    assert result["kernel_exec_result"]["outcome"] in ("compile_error", "runtime_error")
    assert capsys.readouterr().out == ""


def test_readme_transformer_layer_gets_a_verdict(live_server: Server) -> None:
    namespace = run_python("001.8", live_server)
    assert namespace["response"].status_code == 200
    result = namespace["response"].json()["kernel_exec_result"]
    # Without io or get_inputs() the server feeds float32[1024] per forward() argument, which
    # MultiheadAttention refuses (it wants 2-D or 3-D): a runtime error with torch's reason.
    assert result["compiled"] is True
    assert result["outcome"] == "runtime_error"
    assert "MultiheadAttention" in result["runtime_error"] or "query" in result["runtime_error"]


def test_readme_compare_of_placeholder_sources_reports_the_reference(live_server: Server) -> None:
    namespace = run_python("001.9", live_server)
    body = namespace["response"].json()
    assert namespace["response"].status_code == 200
    assert body["status"] == "error" and "reference" in body["error"]
    assert body["ref_exec_result"]["compiled"] is False
    assert body["kernel_exec_result"]["outcome"] == "not_run"


def test_function_targeting_runs_the_named_function(live_server: Server) -> None:
    assert KernelMetadata.model_validate(fragment("001.17")["metadata"]).function_name == (
        "optimized_softmax"
    )
    namespace = run_python("004.9", live_server)
    body = namespace["response"].json()
    assert body["kernel_exec_result"]["outcome"] == "success", body
    assert body["kernel_exec_result"]["metadata"]["outputs"] == ["float32[64, 128]"]


def test_api_guide_linear_model_reports_its_shape_error(
    live_server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    # 4.1 feeds x = float32[1024] to Linear(512, 256): it compiles, then fails on the shapes.
    namespace = run_python("004.5", live_server)
    result = namespace["result"]["kernel_exec_result"]
    assert result["compiled"] is True and result["outcome"] == "runtime_error"
    assert capsys.readouterr().out == "Compiled: True\nRuntime: 0.0ms\n"


def test_api_guide_compare_of_torch_and_torch_cuda_on_cpu_names_the_gpu(
    live_server: Server,
) -> None:
    if cuda_available():
        pytest.skip("the whole example runs on a GPU host (next test)")
    namespace = run_python("004.6", live_server, prefix_before("004.6", "ref_time = "))
    result = namespace["result"]
    assert result["ref_runtime"]["mean"] > 0
    custom = result["kernel_exec_result"]
    assert (
        custom["outcome"] == "compile_error" and "needs a CUDA GPU" in custom["compilation_error"]
    )


@pytest.mark.gpu
def test_api_guide_compare_of_torch_and_torch_cuda_prints_the_speedup(
    live_server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    namespace = run_python("004.6", live_server)
    assert namespace["result"]["kernel_exec_result"]["correctness"] is True
    assert re.fullmatch(r"Speedup: \d+\.\d\dx\n", capsys.readouterr().out)


def test_legacy_format_is_still_accepted_as_a_compare(live_server: Server) -> None:
    old_format = eval(EXAMPLES["004.28"].split("# Automatically converted to:")[0])
    r = httpx.post(f"{live_server.url}/", json=old_format, timeout=CURL_TIMEOUT_S)
    assert r.status_code == 200
    body = r.json()
    # "class Model..." is not Python: the reference does not compile, and says so.
    assert body["ref_exec_result"]["compiled"] is False
    assert "SyntaxError" in body["ref_exec_result"]["compilation_error"]
    assert body["kernel_exec_result"]["outcome"] == "not_run" and body["warnings"] == []


def test_response_patterns_compile_failed_and_validation_failed(live_server: Server) -> None:
    body = httpx.post(
        f"{live_server.url}/evaluate", json=json.loads(EXAMPLES["000.9"]), timeout=300
    ).json()
    assert_documented_shape(body, documented("004.12"))
    assert body["status"] == "success" and body["kernel_exec_result"]["compiled"] is False
    assert body["kernel_exec_result"]["runtime"] == 0
    # 004.1 with a custom kernel that is wrong, for the "Validation Failed" pattern
    request = json.loads(EXAMPLES["004.1"].split("-d '", 1)[1].rsplit("'", 1)[0])
    request["custom_kernel"]["source_code"] = request["custom_kernel"]["source_code"].replace(
        "x + x", "x + 1"
    )
    body = httpx.post(f"{live_server.url}/compare", json=request, timeout=300).json()
    assert_documented_shape(body, documented("004.13"))
    result = body["kernel_exec_result"]
    assert result["correctness"] is False and result["runtime"] == 0
    assert "differ" in result["validation_error"]


# ---- triton, cuda, multi_kernel --------------------------------------------------------------


@pytest.mark.parametrize("key", ["001.10", "004.7"])
def test_triton_vector_add_runs(key: str, live_server: Server) -> None:
    text = EXAMPLES[key]
    if key == "001.10":
        # The README writes JSON's `true` in Python, which no server can help: the one token
        # is made Python's (docs/SEEDS_COMPAT.md).
        assert text.count('"is_meta": true') == 1
        text = text.replace('"is_meta": true', '"is_meta": True')
    body = run_python(key, live_server, text)["response"].json()
    result = body["kernel_exec_result"]
    assert result["outcome"] == "success", result
    assert result["runtime"] > 0 and body["warnings"] == []


def test_cuda_vector_add_runs_on_a_gpu_and_names_the_gpu_on_cpu(live_server: Server) -> None:
    response = run_python("004.8", live_server)["response"]
    assert response.status_code == 200
    result = response.json()["kernel_exec_result"]
    if cuda_available():
        assert result["outcome"] == "success", result
    else:
        assert result["outcome"] == "compile_error"
        assert "needs a CUDA GPU" in result["compilation_error"]


def test_architecture_guide_io_contract_request_is_accepted(live_server: Server) -> None:
    # Its source_code is the page's "...": a valid request whose kernel does not compile.
    r = httpx.post(f"{live_server.url}/evaluate", json=json.loads(EXAMPLES["000.9"]), timeout=300)
    assert r.status_code == 200
    result = r.json()["kernel_exec_result"]
    assert result["compiled"] is False and "no @triton.jit kernel" in result["compilation_error"]


def test_architecture_guide_multi_kernel_request_is_accepted(live_server: Server) -> None:
    # `run(x, y)` with an IOContract that defines only x: a verdict naming y, not a 4xx.
    r = httpx.post(f"{live_server.url}/evaluate", json=json.loads(EXAMPLES["000.13"]), timeout=300)
    assert r.status_code == 200
    body = r.json()
    assert body["warnings"] == []  # metadata.description is a known field
    assert body["kernel_exec_result"]["compiled"] is False
    assert "y" in body["kernel_exec_result"]["compilation_error"]


def test_multi_kernel_cuda_fragment_without_io_is_a_request_error(live_server: Server) -> None:
    # 7.5 leaves out the IOContract the API guide's table calls required for cuda.
    r = httpx.post(f"{live_server.url}/evaluate", json=fragment("004.23"), timeout=60)
    assert r.status_code == 400
    locs = [d["loc"] for d in r.json()["detail"]]
    assert ["body", "kernel", "io"] in locs


# ---- the client library and its builders ----------------------------------------------------


def test_api_guide_client_example_prints_the_runtime(
    live_server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    namespace = run_python("004.3", live_server)
    runtime = namespace["result"].kernel_exec_result.runtime
    assert runtime > 0 and capsys.readouterr().out == f"Runtime: {runtime}ms\n"
    assert namespace["inputs"].args[0].tensor_spec.shape == [1024, 512]


def test_api_guide_client_basic_usage_evaluates(live_server: Server) -> None:
    # Up to "# Comparison": what follows passes `KernelCode(...)`, the page's placeholder.
    namespace = run_python("004.26", live_server, prefix_before("004.26", "# Comparison"))
    result = namespace["result"].kernel_exec_result
    assert result.outcome.value == "compile_error"  # its source is the page's "..."


def test_api_guide_builder_style_builds_the_contract() -> None:
    io = run_python("004.27", None)["io"]
    assert [(a.name, a.role) for a in io.args] == [
        ("x", "input"), ("y", "output"), ("alpha", "input"),
    ]  # fmt: skip
    assert io.args[2].value == 2.0
    assert (io.launch.grid.x, io.launch.block.x) == (32, 256)


def test_architecture_guide_spec_builders_and_builder_style() -> None:
    namespace = run_python("000.10", None)
    spec = namespace["tensor_spec"]
    assert (spec.shape, spec.init.kind, spec.init.seed) == ([1024, 1024], "randn", 42)
    contract = run_python("000.11", None)["contract"]
    assert [(a.name, a.role, a.is_meta) for a in contract.args] == [
        ("x", "input", False), ("y", "output", False), ("BLOCK_SIZE", "input", True),
    ]  # fmt: skip
    assert contract.args[0].tensor_spec.init.kind == "randn"
    assert contract.args[2].value == 256
    grid = contract.launch.grid
    assert (grid.x, grid.y, grid.z, contract.launch.num_warps) == (4, 1, 1, 4)


def test_architecture_guide_builder_contract_runs_a_triton_kernel(live_server: Server) -> None:
    contract = run_python("000.11", live_server)["contract"]
    source = (
        "import triton\nimport triton.language as tl\n\n@triton.jit\n"
        "def copy(x_ptr, y_ptr, BLOCK_SIZE: tl.constexpr):\n"
        "    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)\n"
        "    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets))\n"
    )
    kernel = {
        "source_code": source,
        "kernel_type": "triton",
        "io": contract.model_dump(mode="json"),
    }
    body = httpx.post(
        f"{live_server.url}/evaluate", json={"kernel": kernel, "num_trials": 5}, timeout=300
    ).json()
    assert body["kernel_exec_result"]["outcome"] == "success", body


@pytest.mark.parametrize(
    ("key", "model", "field"),
    [
        ("004.14", IOContract, "io"), ("004.15", IOContract, "io"),
        ("004.16", TensorSpec, "tensor_spec"), ("004.17", LaunchConfig, "launch"),
        ("004.18", LaunchConfig, "launch"),
    ],
)  # fmt: skip
def test_api_guide_fragments_are_valid_with_nothing_ignored(
    key: str, model: type[RequestModel], field: str
) -> None:
    value = model.model_validate(fragment(key)[field])
    assert value.ignored_fields() == []


@pytest.mark.parametrize("key", ["004.19", "004.20", "004.21"])
def test_documented_metadata_keys_are_fields(key: str) -> None:
    assert set(fragment(key)["metadata"]) <= set(KernelMetadata.model_fields)


# ---- MCP --------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_architecture_guide_mcp_call_gets_a_result(live_server: Server) -> None:
    # The page imports `mcp.client.transports.StreamableHttpTransport`, which no release of the
    # MCP SDK has; with the SDK this server ships, the same URL goes to Client directly. The
    # tool and its arguments are the page's, verbatim (docs/SEEDS_COMPAT.md).
    from mcp.client import Client

    assert 'client.call_tool("evaluate_kernel", {' in EXAMPLES["000.1"]
    async with Client(f"{live_server.url}/mcp") as client:
        result = await client.call_tool("evaluate_kernel", {
            "kernel_source": "...",
            "kernel_type": "torch"
        })  # fmt: skip
    assert not result.is_error
    assert result.structured_content["kernel_exec_result"]["outcome"] == "compile_error"


@pytest.mark.anyio
async def test_mcp_triton_kernel_without_io_is_an_error_result(live_server: Server) -> None:
    from mcp.client import Client

    async with Client(f"{live_server.url}/mcp") as client:
        result = await client.call_tool(
            "evaluate_kernel", {"kernel_source": "import triton", "kernel_type": "triton"}
        )
    assert result.is_error
    text = " ".join(block.text for block in result.content if block.type == "text")
    assert "kernel.io" in text and "IOContract" in text


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
