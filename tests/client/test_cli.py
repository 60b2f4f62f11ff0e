"""The ``kernel-eval`` CLI against a fake server (httpx.MockTransport)."""

from __future__ import annotations

import io
import json
import re
import socket
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from kernel_eval_client import JobState, JobStatusResponse, cli, cli_format

from .test_client import EXEC_RESULT, FASTAPI_422, STATS, FakeServer

TORCH_SOURCE = (
    "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
)
IO = {
    "args": [
        {
            "name": "x",
            "type": "tensor",
            "tensor_spec": {"shape": [8], "dtype": "float32", "init": {"kind": "randn", "seed": 3}},
        }
    ]
}


@pytest.fixture
def server() -> FakeServer:
    return FakeServer()


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {
        "torch": tmp_path / "model.py",
        "cuda": tmp_path / "kernel.cu",
        "other": tmp_path / "kernel.txt",
        "io": tmp_path / "io.json",
        "meta": tmp_path / "meta.json",
        "bad_io": tmp_path / "bad_io.json",
    }
    paths["torch"].write_text(TORCH_SOURCE)
    paths["cuda"].write_text("__global__ void k(float* x) {}\n")
    paths["other"].write_text("whatever\n")
    paths["io"].write_text(json.dumps(IO))
    paths["meta"].write_text(json.dumps({"kernel_name": "k"}))
    paths["bad_io"].write_text(json.dumps({"args": [{"name": "x", "type": "tensor"}]}))
    return paths


def run(server: FakeServer, *argv: str) -> int:
    return cli.main(
        [*argv, "--server", "http://kernels.test"], transport=httpx.MockTransport(server.handler)
    )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- evaluate / validate -------------------------------------------------------------------------


def test_evaluate_prints_a_table_and_exits_0(
    server: FakeServer, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(server, "evaluate", str(files["torch"]), "--io", str(files["io"]), "--trials", "9")

    out = capsys.readouterr().out
    assert code == 0
    assert "job j1" in out
    lines = {line.split("  ")[0]: line for line in out.splitlines()}
    assert lines["compiled"].split()[-1] == "yes"
    assert lines["outcome"].split()[-1] == "success"
    assert lines["mean (ms)"].split()[-1] == "1.5"
    assert lines["p99 (ms)"].split()[-1] == "1.85"
    assert lines["samples"].split()[-1] == "100"
    assert "cpu_perf_counter (cpu)" in lines["timing"]
    body = server.body()
    assert body["kernel"]["kernel_type"] == "torch"  # from the .py extension
    assert body["num_trials"] == 9 and body["kernel"]["io"]["args"][0]["name"] == "x"


def test_json_prints_the_raw_answer(
    server: FakeServer, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(server, "evaluate", str(files["torch"]), "--json")

    answer = json.loads(capsys.readouterr().out)
    assert code == 0
    assert answer["job_id"] == "j1"
    assert answer["kernel_exec_result"]["runtime_stats"]["percentile_95"] == 1.8


def test_compile_error_exits_1_and_shows_the_error_in_full(
    server: FakeServer, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    error = 'kernel.cu(1): error: expected a ";"\n  __global__ void k(float* x) {}\n  ^'
    server.answer(
        "POST", "/validate", 200,
        {"job_id": "j", "status": "success",
         "kernel_exec_result": {"outcome": "compile_error", "compilation_error": error}},
    )  # fmt: skip

    code = run(
        server, "validate", str(files["cuda"]), "--io", str(files["io"]),
        "--metadata", "@" + str(files["meta"]),
    )  # fmt: skip

    out = capsys.readouterr().out
    assert code == 1
    assert "compile_error" in out
    assert error in out
    body = server.body()
    assert body["kernel"]["kernel_type"] == "cuda"  # from the .cu extension
    assert body["kernel"]["metadata"] == {"kernel_name": "k"}


def test_explicit_type_and_inline_metadata(server: FakeServer, files: dict[str, Path]) -> None:
    code = run(
        server, "evaluate", str(files["other"]), "--type", "triton", "--io", str(files["io"]),
        "--metadata", '{"kernel_name": "add"}', "--timeout", "33",
    )  # fmt: skip

    assert code == 0
    body = server.body()
    assert body["kernel"]["kernel_type"] == "triton"
    assert body["kernel"]["metadata"] == {"kernel_name": "add"}
    assert body["timeout"] == 33


# ---- compare ------------------------------------------------------------------------------------


def test_compare_prints_both_columns_and_the_speedup_of_the_medians(
    server: FakeServer, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ref_stats = {**STATS, "mean": 6.0, "median": 3.0}
    server.answer(
        "POST", "/compare", 200,
        {"job_id": "j3", "status": "success", "kernel_exec_result": EXEC_RESULT,
         "ref_runtime": ref_stats, "ref_exec_result": {**EXEC_RESULT, "runtime_stats": ref_stats}},
    )  # fmt: skip

    code = run(
        server, "compare", str(files["torch"]), str(files["cuda"]), "--io", str(files["io"]),
        "--metadata", '{"kernel_name": "k"}', "--atol", "0.001", "--correct-trials", "2",
    )  # fmt: skip

    out = capsys.readouterr().out
    assert code == 0
    header = next(line for line in out.splitlines() if "reference" in line)
    assert header.split() == ["reference", "custom"]
    median = next(line for line in out.splitlines() if line.startswith("median (ms)"))
    assert median.split()[-2:] == ["3", "1.5"]
    assert "speedup  2x (of the medians; custom is faster)" in out  # 3.0 / 1.5, not 6.0 / 1.5
    body = server.body()
    assert body["ref_kernel"]["kernel_type"] == "torch" and "io" not in body["ref_kernel"]
    assert body["custom_kernel"]["kernel_type"] == "cuda"
    assert (body["atol"], body["num_correct_trials"]) == (0.001, 2)


def test_incorrect_custom_kernel_exits_1(
    server: FakeServer, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    server.answer(
        "POST", "/compare", 200,
        {"job_id": "j", "status": "success", "ref_runtime": STATS, "ref_exec_result": EXEC_RESULT,
         "kernel_exec_result": {"outcome": "incorrect", "compiled": True, "correctness": False,
                                "validation_error": "max abs diff 0.5 at index 3"}},
    )  # fmt: skip

    code = run(server, "compare", str(files["torch"]), str(files["torch"]))

    out = capsys.readouterr().out
    assert code == 1
    assert "custom validation error:\nmax abs diff 0.5 at index 3" in out
    assert "speedup" not in out  # the custom kernel was not timed


# ---- usage errors (exit 2) ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["evaluate", "{other}"], "cannot tell the kernel type of"),
        (["evaluate", "{torch}", "--io", "{bad_io}"], "needs a tensor_spec"),
        (["evaluate", "{torch}", "--metadata", "{{not json"], "--metadata is not valid"),
        (["evaluate", "{torch}", "--io", "{torch}.missing"], "cannot read"),
    ],
)
def test_usage_errors_exit_2(
    server: FakeServer,
    files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    code = run(server, *(arg.format(**{k: str(v) for k, v in files.items()}) for arg in argv))

    assert code == 2
    assert message in capsys.readouterr().err
    assert server.requests == []


def test_422_exits_2_naming_the_field(
    server: FakeServer, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    server.answer("POST", "/evaluate", 422, FASTAPI_422)

    code = run(server, "evaluate", str(files["torch"]))

    assert code == 2
    assert "kernel.kernel_type: Input should be" in capsys.readouterr().err


def test_argparse_errors_and_bad_server_urls_exit_2(
    server: FakeServer, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        run(server, "evaluate")
    assert caught.value.code == 2
    assert cli.main(["health", "--server", "localhost:8000"]) == 2
    assert "server URL must be http(s)" in capsys.readouterr().err


# ---- server problems (exit 3) ---------------------------------------------------------------------


def test_unreachable_server_exits_3(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["health", "--server", f"http://127.0.0.1:{closed_port()}"])

    assert code == 3
    assert "cannot reach the server" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (
            408,
            {"job_id": "j", "status": "error", "error": "timed out after 5 seconds"},
            "timed out",
        ),
        (500, {"detail": "internal server error: boom"}, "boom"),
    ],
)
def test_job_timeout_and_server_fault_exit_3(
    server: FakeServer,
    files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    status: int,
    body: dict[str, Any],
    message: str,
) -> None:
    server.answer("POST", "/evaluate", status, body)

    assert run(server, "evaluate", str(files["torch"])) == 3
    assert message in capsys.readouterr().err


# ---- queries ------------------------------------------------------------------------------------


def test_health_stats_and_job(server: FakeServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.answer(
        "GET", "/job/j3", 200,
        {"job_id": "j3", "kind": "compare", "state": "completed", "created_at": 1.0e9,
         "result": {"job_id": "j3", "status": "success",
                    "kernel_exec_result": {**EXEC_RESULT, "metadata": {"speedup": 3.0}},
                    "ref_runtime": {**STATS, "mean": 9.0}}},
    )  # fmt: skip

    assert run(server, "health") == 0
    health = capsys.readouterr().out
    assert run(server, "stats") == 0
    stats = capsys.readouterr().out
    assert run(server, "job", "j3") == 0
    job = capsys.readouterr().out
    assert run(server, "job", "missing") == 2
    missing = capsys.readouterr().err

    assert "status" in health and "healthy" in health and "cpu" in health
    assert re.search(r"^jobs timed out +1$", stats, re.MULTILINE)
    assert (
        re.search(r"^state +completed$", job, re.MULTILINE)
        and "speedup  3x (of the medians; custom is faster)" in job  # the server's figure
    )
    assert "no job with id 'missing'" in missing


def test_help_documents_the_exit_codes() -> None:
    text = cli.build_parser().format_help()

    for code in (0, 1, 2, 3):
        assert f"\n  {code}  " in text
    assert "KERNEL_EVAL_SERVER" in text


# ---- progress on a terminal ----------------------------------------------------------------------


class FakeTerminal(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def streams(monkeypatch: pytest.MonkeyPatch, stdout_tty: bool, stderr_tty: bool
            ) -> tuple[FakeTerminal, FakeTerminal]:
    out, err = FakeTerminal(stdout_tty), FakeTerminal(stderr_tty)
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setenv("COLUMNS", "200")  # the status line is cut to the terminal's width
    return out, err


def job_status(state: str, **fields: Any) -> dict[str, Any]:
    return {"job_id": "j1", "kind": "evaluate", "state": state, "created_at": 1.0, **fields}


@pytest.mark.parametrize(
    ("argv", "path", "label"),
    [
        (["evaluate", "{torch}"], "/evaluate", "evaluating"),
        (["compare", "{torch}", "{torch}"], "/compare", "comparing"),
        (["validate", "{torch}"], "/validate", "validating"),
    ],
)
def test_on_a_terminal_the_job_is_polled_and_each_state_shows_on_a_live_line(
    server: FakeServer,
    files: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    path: str,
    label: str,
) -> None:
    result = {"job_id": "j1", "status": "success", "kernel_exec_result": EXEC_RESULT,
              "ref_runtime": STATS, "ref_exec_result": EXEC_RESULT}
    polls = iter([job_status("queued"), job_status("running", gpu_id=0),
                  job_status("running", gpu_id=0), job_status("completed", result=result)])
    server.routes[("POST", path)] = lambda r: httpx.Response(202, json=job_status("queued"))
    server.routes[("GET", "/job/j1")] = lambda r: httpx.Response(200, json=next(polls))
    out, err = streams(monkeypatch, stdout_tty=True, stderr_tty=True)

    code = run(server, *(arg.format(**{k: str(v) for k, v in files.items()}) for arg in argv))

    assert code == 0
    assert server.requests[0].url.params.get("wait") == "false"
    assert [r.url.path for r in server.requests[1:]] == ["/job/j1"] * 4
    drawn = err.getvalue()
    assert f"{label}  job j1  queued" in drawn
    assert re.search(r"queued \d+\.\ds, running on GPU 0 \d+\.\ds", drawn), drawn
    assert drawn.endswith("\r\033[K")  # the line is cleared before the result prints
    assert re.search(r"^outcome +success", out.getvalue(), re.MULTILINE)


@pytest.mark.parametrize(
    ("stdout_tty", "stderr_tty", "extra"),
    [(True, True, ["--json"]), (False, True, []), (True, False, [])],
    ids=["json", "stdout-redirected", "stderr-redirected"],
)
def test_without_a_terminal_on_both_streams_or_with_json_nothing_shows_and_one_request_waits(
    server: FakeServer,
    files: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    stdout_tty: bool,
    stderr_tty: bool,
    extra: list[str],
) -> None:
    out, err = streams(monkeypatch, stdout_tty, stderr_tty)

    code = run(server, "evaluate", str(files["torch"]), *extra)

    assert code == 0
    assert err.getvalue() == ""
    assert [(r.url.path, dict(r.url.params)) for r in server.requests] == [("/evaluate", {})]
    assert "j1" in out.getvalue()


def test_the_status_line_says_how_long_the_job_spent_in_each_state() -> None:
    now = [100.0]
    line = cli_format._StatusLine("comparing", FakeTerminal(tty=True), clock=lambda: now[0])
    status = JobStatusResponse.model_validate(job_status("queued"))
    assert line.text() == "comparing  submitting 0.0s"

    now[0] = 100.2
    line.update(status)
    now[0] = 100.6
    line.update(status.model_copy(update={"state": JobState.RUNNING, "gpu_id": 3}))
    now[0] = 102.0
    line.update(status.model_copy(update={"state": JobState.RUNNING, "gpu_id": 3}))
    now[0] = 102.7

    assert line.text() == "comparing  job j1  queued 0.4s, running on GPU 3 2.1s"


def test_health_and_stats_sum_up_a_ray_cluster_in_one_line() -> None:
    from kernel_eval_client import ClusterInfo, HealthResponse, StatsResponse

    cluster = ClusterInfo.model_validate({
        "address": "head:6379", "resource": "GPU", "busy": 1, "lost": 1,
        "nodes": [{"node_id": "a", "address": "10.0.0.1", "alive": True, "gpus": 2, "slots": 2,
                   "busy": 1},
                  {"node_id": "b", "address": "10.0.0.2", "alive": False, "gpus": 0,
                   "slots": 0, "busy": 0}],
        "slots": [{"index": 0, "state": "busy"}, {"index": 1, "state": "lost"}],
    })
    health = HealthResponse(status="degraded", gpu_available=True, gpu_count=2, device="cuda",
                            cluster=cluster)
    stats = StatsResponse(jobs_completed=0, jobs_failed=0, jobs_timed_out=0, jobs_queued=0,
                          jobs_running=1, avg_runtime_ms=0, gpu_utilization_pct=0,
                          uptime_seconds=1, device="cuda", gpu_count=2, worker_slots=2,
                          cluster=cluster)
    line = "1 node, 2 GPU slots (1 busy, 1 lost) at head:6379"

    assert re.search(rf"cluster\s+{re.escape(line)}", cli.format_health(health))
    assert re.search(rf"cluster\s+{re.escape(line)}", cli.format_stats(stats))
    assert "node_id" not in cli.format_stats(stats)


def test_health_shows_the_languages_that_run_here_and_names_those_that_do_not() -> None:
    from kernel_eval_client.models import HealthResponse, LanguageInfo

    def lang(name: str, available: bool, version: str | None) -> LanguageInfo:
        return LanguageInfo(name=name, title=name, module=name, distribution=name,
                            version=version, available=available,
                            reason=None if available else "not installed")

    health = HealthResponse(status="healthy", gpu_available=True, gpu_count=1, device="cuda",
                            languages=[lang("tilelang", True, "0.1.7"),
                                       lang("helion", True, "0.2.1"),
                                       lang("cutile", False, "1.8.1"),
                                       lang("cute_dsl", False, None)])
    shown = cli.format_health(health)
    assert re.search(r"languages\s+tilelang 0\.1\.7, helion 0\.2\.1; not here: cutile, "
                     r"cute_dsl \(see /health for why\)", shown), shown
    none = HealthResponse(status="healthy", gpu_available=False, gpu_count=0, device="cpu")
    assert re.search(r"languages\s+-", cli.format_health(none))
