"""The real server on a free localhost port, real workers, a real SQLite file: every route and
every failure a client can meet."""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, cuda_available

pytestmark = pytest.mark.e2e

RELU = "class Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
DOUBLE = "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
X_IO = {
    "args": [
        {
            "name": "x", "type": "tensor", "role": "input",
            "tensor_spec": {"shape": [1024], "dtype": "float32", "init": {"kind": "randn", "seed": 42}},
        }
    ]
}


def torch_kernel(source: str, io: dict | None = X_IO, **meta: str) -> dict:
    kernel: dict = {"source_code": source, "kernel_type": "torch"}
    if io is not None:
        kernel["io"] = io
    if meta:
        kernel["metadata"] = meta
    return kernel


def evaluate(client: httpx.Client, source: str, **extra: object) -> httpx.Response:
    body = {"kernel": torch_kernel(source), "num_trials": 10, **extra}
    return client.post("/evaluate", json=body)


def compare(client: httpx.Client, ref: str, custom: str, **extra: object) -> httpx.Response:
    body = {"ref_kernel": torch_kernel(ref), "custom_kernel": torch_kernel(custom), "num_trials": 10}
    body.update(extra)
    return client.post("/compare", json=body)


def processes_with_argument(argument: str) -> list[int]:
    """Live (non-zombie) processes whose command line holds ``argument``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if argument in (entry / "cmdline").read_bytes().decode(errors="replace") \
                    and process_running(int(entry.name)):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def process_running(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie (a killed orphan may wait to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


# ---- the happy paths --------------------------------------------------------------------


def test_health_reports_device(client: httpx.Client) -> None:
    body = client.get("/health").json()
    assert body["status"] == "healthy"
    assert body["gpu_available"] is cuda_available()
    assert body["device"] == ("cuda" if cuda_available() else "cpu")
    assert "torch" in body["kernel_types"]


def test_evaluate_returns_timing_statistics(client: httpx.Client) -> None:
    r = evaluate(client, RELU, num_trials=25)
    assert r.status_code == 200, r.text
    body = r.json()
    result = body["kernel_exec_result"]
    assert body["status"] == "success" and result["compiled"] is True
    stats = result["runtime_stats"]
    assert stats["num_samples"] == 25
    assert 0 < stats["min"] <= stats["median"] <= stats["max"]
    assert stats["min"] <= stats["mean"] <= stats["max"]
    assert stats["median"] <= stats["percentile_95"] <= stats["percentile_99"] <= stats["max"]
    assert result["runtime"] == stats["mean"]
    assert result["correctness"] is None  # nothing to compare with
    assert stats["device"] == result["metadata"]["device"]
    if not cuda_available():
        assert stats["method"] == "cpu_perf_counter"
        assert "CPU" in result["metadata"]["timing_note"]


def test_evaluate_without_num_trials_samples_adaptively_and_names_its_figures(
    client: httpx.Client,
) -> None:
    r = client.post("/evaluate", json={"kernel": torch_kernel(RELU)})
    assert r.status_code == 200, r.text
    result = r.json()["kernel_exec_result"]
    stats, figures = result["runtime_stats"], result["metadata"]["timing_figures"]
    assert 20 <= stats["num_samples"] <= 1000
    assert figures["sample_rule"] == "adaptive" and figures["samples"] == stats["num_samples"]
    assert figures["stopped_by"] in ("precision", "max_samples", "max_time")
    assert figures["regime"] == "isolated" and figures["isolated_median_ms"] == stats["median"]
    assert figures["method"] == stats["method"]
    assert set(figures) >= {"back_to_back_ms", "back_to_back_reason", "cuda_graph_ms",
                            "cuda_graph_reason", "median_rse"}
    if not cuda_available():
        assert figures["cuda_graph_ms"] is None
        assert figures["cuda_graph_reason"] == "no CUDA graphs on the CPU"


def test_compare_without_num_trials_reports_both_kernels_figures(client: httpx.Client) -> None:
    body = {"ref_kernel": torch_kernel(DOUBLE),
            "custom_kernel": torch_kernel(DOUBLE.replace("x * 2", "x + x"))}
    r = client.post("/compare", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    custom, ref = out["kernel_exec_result"], out["ref_exec_result"]
    assert custom["correctness"] is True, custom
    for result in (custom, ref):
        figures = result["metadata"]["timing_figures"]
        assert figures["sample_rule"] == "adaptive"
        assert figures["samples"] == result["runtime_stats"]["num_samples"] >= 20
    assert out["ref_runtime"]["num_samples"] == ref["runtime_stats"]["num_samples"]


def test_evaluate_without_io_uses_get_inputs(client: httpx.Client) -> None:
    source = (
        "import torch\n"
        "class Model(torch.nn.Module):\n"
        "    def forward(self, a, b):\n"
        "        return a @ b\n"
        "def get_inputs():\n"
        "    return [torch.randn(16, 32).cuda(), torch.randn(32, 8).cuda()]\n"
        "def get_init_inputs():\n"
        "    return []\n"
    )
    r = client.post("/evaluate", json={"kernel": torch_kernel(source, io=None), "num_trials": 5})
    result = r.json()["kernel_exec_result"]
    assert result["compiled"] is True, result
    assert result["metadata"]["outputs"] == ["float32[16, 8]"]


def test_evaluate_targets_a_function(client: httpx.Client) -> None:
    source = (
        "def optimized_softmax(x):\n    return torch.softmax(x, dim=-1)\n"
        "class Model(torch.nn.Module):\n    def forward(self, x):\n        raise RuntimeError('not me')\n"
    )
    r = client.post(
        "/evaluate",
        json={"kernel": torch_kernel(source, function_name="optimized_softmax"), "num_trials": 5},
    )
    assert r.json()["kernel_exec_result"]["outcome"] == "success", r.text


def test_compare_equivalent_kernels(client: httpx.Client) -> None:
    r = compare(client, DOUBLE, "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x + x\n")
    body = r.json()
    assert r.status_code == 200, r.text
    assert body["kernel_exec_result"]["correctness"] is True
    assert body["ref_runtime"]["num_samples"] == 10
    assert body["kernel_exec_result"]["runtime"] > 0


def test_compare_kernelbench_model_and_modelnew(client: httpx.Client) -> None:
    ref = (
        "import torch\nimport torch.nn as nn\n"
        "class Model(nn.Module):\n"
        "    def __init__(self, n):\n        super().__init__()\n        self.lin = nn.Linear(n, n)\n"
        "    def forward(self, x):\n        return torch.relu(self.lin(x))\n"
        "def get_inputs():\n    return [torch.randn(8, 64)]\n"
        "def get_init_inputs():\n    return [64]\n"
    )
    custom = (
        "import torch\nimport torch.nn as nn\n"
        "class ModelNew(nn.Module):\n"
        "    def __init__(self, n):\n        super().__init__()\n        self.lin = nn.Linear(n, n)\n"
        "    def forward(self, x):\n        return self.lin(x).clamp_min(0)\n"
    )
    body = {
        "ref_kernel": torch_kernel(ref, io=None), "custom_kernel": torch_kernel(custom, io=None),
        "num_trials": 5,
    }
    result = client.post("/compare", json=body).json()["kernel_exec_result"]
    assert result["correctness"] is True, result


def test_legacy_root_endpoint_is_a_compare(client: httpx.Client) -> None:
    ref = DOUBLE + "def get_inputs():\n    return [torch.randn(64)]\n"
    custom = "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x + x\n"
    r = client.post("/", json={"ref_code": ref, "custom_code": custom, "num_trials": 5})
    body = r.json()
    assert r.status_code == 200, r.text
    assert body["ref_runtime"] is not None  # the torch reference ran
    result = body["kernel_exec_result"]
    if cuda_available():
        assert result["correctness"] is True, result
    else:  # the custom side is torch_cuda, which needs a GPU
        assert result["compiled"] is False
        assert "torch_cuda" in result["compilation_error"]


def test_job_status_after_the_job(client: httpx.Client) -> None:
    job_id = evaluate(client, RELU).json()["job_id"]
    status = client.get(f"/job/{job_id}").json()
    assert status["state"] == "completed"
    assert status["result"]["kernel_exec_result"]["compiled"] is True
    assert status["started_at"] <= status["finished_at"]
    assert client.get("/job/no-such-job").status_code == 404


def test_job_status_while_running(client: httpx.Client) -> None:
    slow = "import time\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        time.sleep(0.5)\n        return x\n"
    r = client.post("/evaluate?wait=false", json={"kernel": torch_kernel(slow), "num_trials": 3})
    assert r.status_code == 202
    job_id = r.json()["job_id"]
    seen = set()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        state = client.get(f"/job/{job_id}").json()["state"]
        seen.add(state)
        if state == "completed":
            break
        time.sleep(0.1)
    assert "running" in seen and "completed" in seen


def test_stats_count_jobs(client: httpx.Client) -> None:
    before = client.get("/stats").json()
    evaluate(client, RELU)
    after = client.get("/stats").json()
    assert after["jobs_completed"] == before["jobs_completed"] + 1
    assert after["uptime_seconds"] > before["uptime_seconds"]
    assert after["avg_runtime_ms"] > 0
    assert 0 <= after["gpu_utilization_pct"] <= 100


def test_openapi_docs_are_served(client: httpx.Client) -> None:
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/evaluate", "/compare", "/health", "/stats", "/job/{job_id}", "/admin/cleanup-jobs", "/"):
        assert path in paths


# ---- what a client gets when things go wrong ---------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kernel": {"source_code": "x", "kernel_type": "fortran"}}, "kernel_type"),
        ({"kernel": {"kernel_type": "torch"}}, "source_code"),
        ({}, "kernel"),
        ({"kernel": {"source_code": "x", "kernel_type": "torch"}, "timeout": 601}, "timeout"),
        ({"kernel": {"source_code": "x", "kernel_type": "torch"}, "num_trials": 0}, "num_trials"),
        (
            {"kernel": {"source_code": "x", "kernel_type": "torch", "io": {"args": [
                {"name": "x", "type": "tensor", "tensor_spec": {"shape": [-4], "dtype": "float32"}}
            ]}}},
            "shape",
        ),
        (
            {"kernel": {"source_code": "x", "kernel_type": "torch", "io": {"args": [
                {"name": "x", "type": "tensor", "tensor_spec": {"shape": [10**6, 10**6], "dtype": "float32"}}
            ]}}},
            "shape",
        ),
        (
            {"kernel": {"source_code": "x", "kernel_type": "torch", "io": {"args": [
                {"name": "x", "type": "tensor", "tensor_spec": {"shape": [4], "dtype": "float8"}}
            ]}}},
            "dtype",
        ),
    ],
)
def test_invalid_requests_are_400_naming_the_field(client: httpx.Client, body: dict, field: str) -> None:
    before = client.get("/stats").json()
    r = client.post("/evaluate", json=body)
    assert r.status_code == 400
    detail = r.json()["detail"]
    assert any(field in [str(p) for p in d["loc"]] or field in d["msg"] for d in detail), detail
    after = client.get("/stats").json()
    assert after["jobs_completed"] + after["jobs_queued"] + after["jobs_running"] == (
        before["jobs_completed"] + before["jobs_queued"] + before["jobs_running"]
    )


def test_bad_json_is_400(client: httpx.Client) -> None:
    r = client.post("/evaluate", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert "json" in r.text.lower()


def test_syntax_error_is_a_compilation_error_with_line(client: httpx.Client) -> None:
    source = "class Model(torch.nn.Module):\n    def forward(self, x)\n        return x\n"
    r = evaluate(client, source)
    assert r.status_code == 200
    result = r.json()["kernel_exec_result"]
    assert result["compiled"] is False and result["outcome"] == "compile_error"
    assert "SyntaxError at line 2" in result["compilation_error"]


def test_import_error_is_a_compilation_error(client: httpx.Client) -> None:
    r = evaluate(client, "import no_such_module_xyz\n" + RELU)
    result = r.json()["kernel_exec_result"]
    assert result["compiled"] is False
    assert "no_such_module_xyz" in result["compilation_error"]
    assert "line 1" in result["compilation_error"]


def test_missing_class_lists_what_is_defined(client: httpx.Client) -> None:
    r = evaluate(client, "def helper(x):\n    return x\n")
    error = r.json()["kernel_exec_result"]["compilation_error"]
    assert "'Model' is not defined" in error and "helper" in error


def test_exception_in_kernel_is_a_runtime_error(client: httpx.Client) -> None:
    source = "class Model(torch.nn.Module):\n    def forward(self, x):\n        raise ValueError('kernel exploded')\n"
    r = evaluate(client, source)
    assert r.status_code == 200
    result = r.json()["kernel_exec_result"]
    assert result["outcome"] == "runtime_error" and result["compiled"] is True
    assert "ValueError: kernel exploded" in result["runtime_error"]
    assert "line 3" in result["runtime_error"]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("import ctypes\n        ctypes.string_at(0)", "SIGSEGV"),
        ("import os\n        os._exit(3)", "exited with code 3"),
        ("import os, signal\n        os.kill(os.getpid(), signal.SIGKILL)", "SIGKILL"),
    ],
)
def test_worker_crash_is_a_runtime_error_and_server_keeps_serving(
    client: httpx.Client, body: str, expected: str
) -> None:
    source = f"class Model(torch.nn.Module):\n    def forward(self, x):\n        {body}\n        return x\n"
    r = evaluate(client, source)
    assert r.status_code == 200, r.text
    result = r.json()["kernel_exec_result"]
    assert result["outcome"] == "runtime_error"
    assert expected in result["runtime_error"]
    assert "running the kernel" in result["runtime_error"]
    # the next job on the same slots works
    for _ in range(2):
        assert evaluate(client, RELU).json()["kernel_exec_result"]["compiled"] is True


def test_timeout_is_408_and_kills_the_worker_and_its_children(client: httpx.Client) -> None:
    marker = f"{300 + random.random():.9f}"  # a sleep argument no other process has
    source = (
        "import subprocess, time\n"
        "class Model(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        f"        subprocess.Popen(['sleep', '{marker}'])\n"
        "        time.sleep(300)\n"
        "        return x\n"
    )
    r = evaluate(client, source, timeout=3)
    assert r.status_code == 408
    body = r.json()
    assert body["status"] == "error"
    assert body["error"].startswith("Evaluation timed out after 3 seconds")
    assert body["kernel_exec_result"]["outcome"] == "timeout"
    assert not processes_with_argument(marker)
    assert client.get(f"/job/{body['job_id']}").json()["state"] == "timed_out"
    assert evaluate(client, RELU).status_code == 200


def test_wrong_result_is_incorrect_with_a_useful_message(client: httpx.Client) -> None:
    r = compare(client, DOUBLE, "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2 + (x > 2.5)\n")
    result = r.json()["kernel_exec_result"]
    assert result["correctness"] is False and result["outcome"] == "incorrect"
    message = result["validation_error"]
    assert "elements of float32[1024] differ" in message
    assert "max abs diff 1" in message
    assert "first mismatch at [" in message
    assert result["runtime"] == 0 and result["runtime_stats"] is None
    # what the kernel held is reported for a wrong answer too, as for a right one
    resources = result["metadata"]["resources"]
    assert resources["input_bytes"] == 4096 and resources["output_bytes"] == 4096, resources
    assert "peak_memory_bytes" in resources


def test_shape_and_dtype_mismatches_are_named(client: httpx.Client) -> None:
    shape = compare(client, DOUBLE, "class Model(torch.nn.Module):\n    def forward(self, x):\n        return (x * 2)[:10]\n")
    assert "shape mismatch: expected [1024], got [10]" in shape.json()["kernel_exec_result"]["validation_error"]
    dtype = compare(client, DOUBLE, "class Model(torch.nn.Module):\n    def forward(self, x):\n        return (x * 2).double()\n")
    assert "dtype mismatch: expected float32, got float64" in dtype.json()["kernel_exec_result"]["validation_error"]


def test_tolerances_can_be_set_per_request(client: httpx.Client) -> None:
    near = "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2 + 1e-3\n"
    assert compare(client, DOUBLE, near).json()["kernel_exec_result"]["correctness"] is False
    loose = compare(client, DOUBLE, near, atol=1e-2).json()["kernel_exec_result"]
    assert loose["correctness"] is True


def test_a_float8_output_is_correct_when_equal_and_incorrect_when_wrong(
        client: httpx.Client) -> None:
    def model(forward: str) -> str:
        return ("import torch\nclass Model(torch.nn.Module):\n"
                f"    def forward(self, x):\n        return {forward}\n"
                "def get_inputs():\n    return [torch.randn(32, 64)]\n")

    ref = model("(x * 2).to(torch.float8_e4m3fn)")

    def result(custom: str) -> dict:
        body = {"ref_kernel": torch_kernel(ref, io=None),
                "custom_kernel": torch_kernel(custom, io=None), "num_trials": 5}
        return client.post("/compare", json=body).json()["kernel_exec_result"]

    same = result(model("(x + x).to(torch.float8_e4m3fn)"))
    assert same["correctness"] is True, same
    wrong = result(model("(x * 3).to(torch.float8_e4m3fn)"))
    assert wrong["correctness"] is False and wrong["outcome"] == "incorrect", wrong
    assert "elements of float8_e4m3fn[32, 64] differ beyond atol=" in wrong["validation_error"]


def test_an_iocontract_kernel_with_a_float8_input_is_compared(client: httpx.Client) -> None:
    io = {"args": [{"name": "x", "type": "tensor", "role": "input", "tensor_spec": {
        "shape": [1024], "dtype": "float8_e4m3fn", "init": {"kind": "randn", "seed": 7}}}]}
    ref = "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x.float() * 2\n"
    same = "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x.float() + x.float()\n"
    wrong = "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x.float() * 3\n"
    body = {"ref_kernel": torch_kernel(ref, io=io), "custom_kernel": torch_kernel(same, io=io),
            "num_trials": 5}
    result = client.post("/compare", json=body).json()["kernel_exec_result"]
    assert result["correctness"] is True, result
    body["custom_kernel"] = torch_kernel(wrong, io=io)
    result = client.post("/compare", json=body).json()["kernel_exec_result"]
    assert result["correctness"] is False and result["outcome"] == "incorrect", result


def test_cached_output_fails_on_fresh_inputs(client: httpx.Client) -> None:
    # A kernel that remembers its first answer passes trial 1 only: each trial draws new inputs.
    cheat = (
        "class Model(torch.nn.Module):\n"
        "    cache = None\n"
        "    def forward(self, x):\n"
        "        if Model.cache is None:\n            Model.cache = x * 2\n"
        "        return Model.cache\n"
    )
    result = compare(client, DOUBLE, cheat).json()["kernel_exec_result"]
    assert result["correctness"] is False
    assert "correctness trial 2 of 5" in result["validation_error"]


def test_kernel_that_modifies_its_input_fails(client: httpx.Client) -> None:
    sneaky = "class Model(torch.nn.Module):\n    def forward(self, x):\n        y = x * 2\n        x.zero_()\n        return y\n"
    result = compare(client, DOUBLE, sneaky).json()["kernel_exec_result"]
    assert result["correctness"] is False
    assert "modified its input 'x'" in result["validation_error"]


def test_custom_import_cannot_change_the_reference(client: httpx.Client) -> None:
    # The custom module patches torch at import; the reference already ran, so the patch
    # cannot make the reference agree with a wrong custom kernel.
    patcher = (
        "import torch\n"
        "torch.Tensor.__mul__ = lambda self, other: torch.zeros_like(self)\n"
        "class Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.zeros_like(x)\n"
    )
    result = compare(client, DOUBLE, patcher).json()["kernel_exec_result"]
    assert result["correctness"] is False


def test_broken_reference_is_reported_as_such(client: httpx.Client) -> None:
    body = compare(client, "class Model(torch.nn.Module)\n    pass\n", DOUBLE).json()
    assert body["status"] == "error"
    assert "reference" in body["error"] and "SyntaxError" in body["error"]
    assert body["ref_exec_result"]["compiled"] is False
    assert body["kernel_exec_result"]["outcome"] == "not_run"


# ---- persistence and clean-up -------------------------------------------------------------


def test_finished_job_survives_a_restart(server_factory, tmp_path: Path) -> None:
    first: Server = server_factory(tmp_path / "state")
    job_id = httpx.post(
        f"{first.url}/evaluate", json={"kernel": torch_kernel(RELU), "num_trials": 3}, timeout=120
    ).json()["job_id"]
    first.stop()
    second: Server = server_factory(tmp_path / "state")
    status = httpx.get(f"{second.url}/job/{job_id}").json()
    assert status["state"] == "completed"
    assert status["result"]["kernel_exec_result"]["compiled"] is True


def test_job_in_flight_when_server_dies_is_failed_at_startup(server_factory, tmp_path: Path) -> None:
    first: Server = server_factory(tmp_path / "state")
    slow = "import time\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        time.sleep(120)\n        return x\n"
    job_id = httpx.post(
        f"{first.url}/evaluate?wait=false", json={"kernel": torch_kernel(slow), "num_trials": 3}
    ).json()["job_id"]
    deadline = time.monotonic() + 60
    while httpx.get(f"{first.url}/job/{job_id}").json()["state"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    first.stop(signal.SIGKILL)
    second: Server = server_factory(tmp_path / "state")
    status = httpx.get(f"{second.url}/job/{job_id}").json()
    assert status["state"] == "failed"
    assert "server stopped" in status["error"]


def test_cleanup_removes_old_jobs_and_files(server_factory, tmp_path: Path) -> None:
    server: Server = server_factory(tmp_path / "state")
    job_id = httpx.post(
        f"{server.url}/evaluate", json={"kernel": torch_kernel(RELU), "num_trials": 3}, timeout=120
    ).json()["job_id"]
    job_dir = tmp_path / "state" / "jobs" / job_id
    assert (job_dir / "request.json").exists()
    kept = httpx.post(f"{server.url}/admin/cleanup-jobs").json()  # default: older than 24 h
    assert kept["removed_jobs"] == 0 and job_dir.exists()
    removed = httpx.post(f"{server.url}/admin/cleanup-jobs?older_than_hours=0").json()
    assert removed["removed_jobs"] >= 1 and removed["removed_files"] >= 1
    assert not job_dir.exists()
    assert httpx.get(f"{server.url}/job/{job_id}").status_code == 404


def test_a_kernel_forging_a_worker_error_frame_gets_a_runtime_error_not_a_500(
    client: httpx.Client,
) -> None:
    # The kernel writes an "internal error" frame of the worker protocol on every socket it
    # holds, then leaves: the server must not take that for a fault of its own.
    source = (
        "import os, socket, sys\n"
        "class Model(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        Channel = sys.modules['shared.channel'].Channel\n"
        "        for fd in range(3, 256):\n"
        "            try:\n"
        "                sock = socket.socket(fileno=os.dup(fd))\n"
        "                if sock.type == socket.SOCK_STREAM:\n"
        "                    Channel(sock).send({'error': 'forged by the kernel'})\n"
        "            except OSError:\n"
        "                pass\n"
        "        os._exit(0)\n"
    )
    r = evaluate(client, source)
    assert r.status_code == 200, r.text
    result = r.json()["kernel_exec_result"]
    assert result["outcome"] == "runtime_error"
    assert "forged by the kernel" in result["runtime_error"] or "worker process" in result["runtime_error"]
