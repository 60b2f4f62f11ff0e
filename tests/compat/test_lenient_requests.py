"""What a client written for the seeds' server meets here, in-process (TestClient, real workers).

- Unknown request keys are accepted, ignored and named in the response's ``warnings``.
- The seeds' clients' old names are read as this server's fields (``collect_device_metrics``,
  a ``kernel_name`` beside ``source_code``).
- An invalid request is a 400 (FastAPI would say 422) whose body names the field.
- A kernel that cannot run by construction is an invalid request, not a compile result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from kernel_eval_client import InvalidRequestError, KernelCode, KernelEvalClient, KernelType

from app import create_app
from shared.models import CompareRequest, EvaluationRequest
from shared.settings import Settings

DOUBLE = "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
X_IO: dict[str, Any] = {
    "args": [
        {
            "name": "x", "type": "tensor", "role": "input",
            "tensor_spec": {"shape": [256], "dtype": "float32", "init": {"kind": "randn", "seed": 1}},
        }
    ]
}  # fmt: skip
# Two Triton kernels with one signature: which one runs shows in a comparison with x * 2.
TWO_TRITON_KERNELS = """
import triton
import triton.language as tl

@triton.jit
def add_one(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)

@triton.jit
def double(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)
"""
TRITON_IO: dict[str, Any] = {
    "args": [
        X_IO["args"][0],
        {"name": "out", "type": "tensor", "role": "output", "tensor_spec": {"shape": [256]}},
        {"name": "n", "type": "int", "value": 256},
        {"name": "BLOCK", "type": "int", "value": 128, "is_meta": True},
    ],
    "launch": {"grid": {"x": 2}},
}
CUDA_TWO_KERNELS = (
    "__global__ void scale(float* x, int n) { x[threadIdx.x] *= 2; }\n"
    "__global__ void fill(float* x, int n) { x[threadIdx.x] = 1; }\n"
)
CUDA_IO: dict[str, Any] = {
    "args": [
        {"name": "x", "type": "tensor", "role": "inout",
         "tensor_spec": {"shape": [32], "init": {"kind": "randn"}}},
        {"name": "n", "type": "int", "value": 32},
    ],
    "launch": {"grid": {"x": 1}, "block": {"x": 32}},
}


def torch_kernel(source: str = DOUBLE, **extra: Any) -> dict[str, Any]:
    return {"source_code": source, "kernel_type": "torch", "io": X_IO, **extra}


@pytest.fixture
def make_api(tmp_path: Path) -> Iterator[Callable[..., TestClient]]:
    clients: list[TestClient] = []

    def make(**settings: Any) -> TestClient:
        app = create_app(
            Settings(
                device="cpu", mode="fastapi", max_workers=1, spare_workers=False,
                job_store_path=tmp_path / "jobs.db", job_dir=tmp_path / "jobs",
                build_cache_dir=tmp_path / "cache", **settings,
            )
        )  # fmt: skip
        client = TestClient(app)
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def api(make_api: Callable[..., TestClient]) -> TestClient:
    return make_api()


def jobs_seen(api: TestClient) -> int:
    stats = api.get("/stats").json()
    return int(stats["jobs_completed"] + stats["jobs_queued"] + stats["jobs_running"])


# ---- unknown keys ------------------------------------------------------------------------------


def test_unknown_fields_are_ignored_and_named_in_warnings(api: TestClient) -> None:
    io = {"args": [{**X_IO["args"][0], "colour": "blue"}]}
    body = {
        "kernel": torch_kernel(io=io, kernal_name="typo"),
        "num_trials": 5,
        "num_trails": 50,
    }
    r = api.post("/evaluate", json=body)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["warnings"] == [
        "unknown field 'num_trails' was ignored",
        "unknown field 'kernel.kernal_name' was ignored",
        "unknown field 'kernel.io.args.0.colour' was ignored",
    ]
    result = answer["kernel_exec_result"]
    assert result["outcome"] == "success" and result["runtime_stats"]["num_samples"] == 5


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/validate", {"kernel": torch_kernel(), "trials": 3}),
        ("/", {"ref_code": DOUBLE, "custom_code": DOUBLE, "num_trials": 3, "trials": 3}),
    ],
)
def test_validate_and_legacy_routes_name_unknown_fields(
    api: TestClient, path: str, body: dict[str, Any]
) -> None:
    r = api.post(path, json=body)
    assert r.status_code == 200, r.text
    assert r.json()["warnings"] == ["unknown field 'trials' was ignored"]


def test_a_job_accepted_without_waiting_names_unknown_fields(api: TestClient) -> None:
    r = api.post("/evaluate?wait=false", json={"kernel": torch_kernel(), "priority": "high"})
    assert r.status_code == 202
    assert r.json()["warnings"] == ["unknown field 'priority' was ignored"]


# ---- old names ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "body"),
    [
        (EvaluationRequest, {"kernel": torch_kernel()}),
        (CompareRequest, {"ref_kernel": torch_kernel(), "custom_kernel": torch_kernel()}),
    ],
)
def test_collect_device_metrics_is_read_as_enable_device_metrics(
    model: type[EvaluationRequest | CompareRequest], body: dict[str, Any]
) -> None:
    request = model.model_validate({**body, "collect_device_metrics": True})
    assert request.enable_device_metrics is True
    assert request.ignored_fields() == []


def test_an_old_name_beside_its_new_name_is_ignored_and_named() -> None:
    request = EvaluationRequest.model_validate(
        {"kernel": torch_kernel(), "collect_device_metrics": True, "enable_device_metrics": False}
    )
    assert request.enable_device_metrics is False
    assert request.ignored_fields() == ["collect_device_metrics"]


def test_collect_device_metrics_gets_no_warning_over_http(api: TestClient) -> None:
    r = api.post(
        "/evaluate",
        json={"kernel": torch_kernel(), "num_trials": 3, "collect_device_metrics": False},
    )
    assert r.status_code == 200 and r.json()["warnings"] == []


def test_kernel_name_beside_source_code_is_read_as_metadata_kernel_name() -> None:
    kernel = KernelCode.model_validate(
        {
            "source_code": "x",
            "kernel_type": "cuda",
            "kernel_name": "k",
            "metadata": {"jitify": True},
        }
    )
    assert kernel.meta().kernel_name == "k" and kernel.meta().jitify is True
    assert kernel.ignored_fields() == []
    # metadata.kernel_name wins over the old place, which is then reported as ignored
    both = KernelCode.model_validate(
        {
            "source_code": "x",
            "kernel_type": "cuda",
            "kernel_name": "a",
            "metadata": {"kernel_name": "b"},
        }
    )
    assert both.meta().kernel_name == "b" and both.ignored_fields() == ["kernel_name"]


@pytest.mark.parametrize(("name", "correct"), [("double", True), ("add_one", False)])
def test_kernel_name_beside_source_code_picks_the_triton_kernel_that_runs(
    api: TestClient, name: str, correct: bool
) -> None:
    custom = {
        "source_code": TWO_TRITON_KERNELS, "kernel_type": "triton", "io": TRITON_IO,
        "kernel_name": name,
    }  # fmt: skip
    r = api.post(
        "/compare", json={"ref_kernel": torch_kernel(), "custom_kernel": custom, "num_trials": 2}
    )
    assert r.status_code == 200, r.text
    assert r.json()["warnings"] == []
    assert r.json()["kernel_exec_result"]["correctness"] is correct, r.json()["kernel_exec_result"]


# ---- the status of an invalid request ---------------------------------------------------------------


def test_an_invalid_request_is_a_400_whose_body_names_the_field(
    make_api: Callable[..., TestClient],
) -> None:
    api = make_api()
    r = api.post("/evaluate", json={"kernel": torch_kernel(), "timeout": 601})
    assert r.status_code == 400
    assert [d["loc"] for d in r.json()["detail"]] == [["body", "timeout"]]
    bad_json = api.post("/evaluate", content=b"{", headers={"content-type": "application/json"})
    assert bad_json.status_code == 400 and bad_json.json()["detail"][0]["type"] == "json_invalid"
    assert api.post("/admin/cleanup-jobs?older_than_hours=-1").status_code == 400
    documented = api.get("/openapi.json").json()["paths"]["/evaluate"]["post"]["responses"]
    assert "400" in documented and "422" not in documented


def test_enable_ncu_is_the_api_guides_name_for_enable_device_metrics() -> None:
    assert Settings.from_env({"ENABLE_NCU": "true"}).enable_device_metrics is True
    both = {"ENABLE_NCU": "true", "ENABLE_DEVICE_METRICS": "false"}
    assert Settings.from_env(both).enable_device_metrics is False


# ---- kernels that cannot run -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "loc", "words"),
    [
        (
            "/evaluate", {"kernel": {"source_code": TWO_TRITON_KERNELS, "kernel_type": "triton"}},
            ["body", "kernel", "io"], "triton' needs an IOContract",
        ),
        (
            "/evaluate", {"kernel": {"source_code": CUDA_TWO_KERNELS, "kernel_type": "cuda",
                                     "metadata": {"kernel_name": "scale"}}},
            ["body", "kernel", "io"], "cuda' needs an IOContract",
        ),
        (
            "/evaluate", {"kernel": {"source_code": CUDA_TWO_KERNELS, "kernel_type": "cuda", "io": CUDA_IO}},
            ["body", "kernel", "metadata", "kernel_name"], "several __global__ kernels (scale, fill)",
        ),
        (
            "/validate", {"kernel": {"source_code": "def run(x):\n    return x", "kernel_type": "multi_kernel",
                                     "metadata": {"entry_point": "run"}}},
            ["body", "kernel", "io"], "multi_kernel' needs an IOContract",
        ),
        (
            "/evaluate", {"kernel": {"source_code": "def run(x):\n    return x", "kernel_type": "multi_kernel",
                                     "io": X_IO}},
            ["body", "kernel", "metadata", "entry_point"], "needs metadata.entry_point",
        ),
        (
            "/compare", {"ref_kernel": torch_kernel(),
                         "custom_kernel": {"source_code": TWO_TRITON_KERNELS, "kernel_type": "triton"}},
            ["body", "custom_kernel", "io"], "triton' needs an IOContract",
        ),
    ],
    ids=["triton-no-io", "cuda-no-io", "cuda-two-kernels-no-name", "multi-no-io", "multi-no-entry",
         "compare-custom-triton-no-io"],
)  # fmt: skip
def test_kernels_that_cannot_run_are_invalid_requests(
    api: TestClient, path: str, body: dict[str, Any], loc: list[str], words: str
) -> None:
    before = jobs_seen(api)
    r = api.post(path, json=body)
    assert r.status_code == 400
    detail = r.json()["detail"]
    assert [d["loc"] for d in detail] == [loc]
    assert words in detail[0]["msg"]
    assert jobs_seen(api) == before  # nothing was queued


@pytest.mark.parametrize("role", ["input", "inout"])
def test_a_tensor_the_kernel_reads_without_init_or_data_is_refused_by_name(
        api: TestClient, role: str) -> None:
    """Filled as an output buffer is (NaN), it would give the reference NaN outputs, which any
    kernel returning NaN matches: a comparison that checks nothing."""
    io = {"args": [{"name": "x", "type": "tensor", "role": role, "tensor_spec": {"shape": [64]}},
                   {"name": "out", "type": "tensor", "role": "output",
                    "tensor_spec": {"shape": [64]}}]}
    kernel = {"source_code": "class Model(torch.nn.Module):\n    def forward(self, x, out):\n"
                             "        return x * 2",
              "kernel_type": "torch", "io": io}
    before = jobs_seen(api)
    for path, body in (("/evaluate", {"kernel": kernel}),
                       ("/compare", {"ref_kernel": kernel, "custom_kernel": kernel})):
        r = api.post(path, json=body)
        assert r.status_code == 400, r.text
        message = " ".join(d["msg"] for d in r.json()["detail"])
        assert f"{role} tensor 'x' has neither init nor data" in message
        assert "tensor 'out'" not in message  # the output buffer is fine as it is
    assert jobs_seen(api) == before  # nothing was queued


def test_a_cuda_source_with_one_kernel_or_a_named_kernel_is_accepted() -> None:
    one = {
        "source_code": "__global__ void k(float* x, int n) {}",
        "kernel_type": "cuda",
        "io": CUDA_IO,
    }
    EvaluationRequest.model_validate({"kernel": one})
    named = {**one, "source_code": CUDA_TWO_KERNELS, "metadata": {"kernel_name": "fill"}}
    EvaluationRequest.model_validate({"kernel": named})
    old_place = {**one, "source_code": CUDA_TWO_KERNELS, "kernel_name": "fill"}
    EvaluationRequest.model_validate({"kernel": old_place})


def test_the_client_refuses_a_kernel_that_cannot_run_without_sending_it() -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(500)

    with KernelEvalClient("http://kernels.test", transport=httpx.MockTransport(handler)) as client:
        kernel = KernelCode(source_code=TWO_TRITON_KERNELS, kernel_type=KernelType.TRITON)
        with pytest.raises(InvalidRequestError, match="kernel.io: kernel_type 'triton'") as caught:
            client.evaluate(kernel)
    assert sent == []
    assert [e["loc"] for e in caught.value.errors] == [["kernel", "io"]]
