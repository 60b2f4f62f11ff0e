"""The FastAPI app in-process (TestClient): routing, validation, status codes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app import create_app
from shared.settings import Settings


@pytest.fixture
def api(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        device="cpu", mode="fastapi", max_workers=1, spare_workers=False,
        job_store_path=tmp_path / "jobs.db", job_dir=tmp_path / "jobs",
        build_cache_dir=tmp_path / "cache",
    )
    with TestClient(create_app(settings)) as client:
        yield client


def test_health_in_cpu_mode(api: TestClient) -> None:
    body = api.get("/health").json()
    assert body["gpu_available"] is False and body["device"] == "cpu" and body["gpu_count"] == 0
    assert "cuda" not in body["kernel_types"] and "torch" in body["kernel_types"]


def test_evaluate_in_process(api: TestClient) -> None:
    r = api.post("/evaluate", json={
        "kernel": {"source_code": "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2",
                   "kernel_type": "torch"},
        "num_trials": 3,
    })
    assert r.status_code == 200
    body = r.json()
    assert {"job_id", "status", "kernel_exec_result", "error", "warnings"} <= set(body)
    assert not {"ref_runtime", "ref_exec_result"} & set(body)  # no compare fields
    assert body["warnings"] == []
    assert body["kernel_exec_result"]["compiled"] is True


def test_validation_errors_name_the_field(api: TestClient) -> None:
    r = api.post("/compare", json={"ref_kernel": {"source_code": "x", "kernel_type": "torch"}})
    assert r.status_code == 400  # the seeds' status for an invalid request
    assert ["body", "custom_kernel"] in [d["loc"] for d in r.json()["detail"]]
    r = api.post("/", json={"ref_code": "", "custom_code": "y"})
    assert r.status_code == 400 and r.json()["detail"][0]["loc"] == ["body", "ref_code"]


def test_unknown_job_is_404(api: TestClient) -> None:
    assert api.get("/job/nope").status_code == 404


def test_cleanup_rejects_negative_age(api: TestClient) -> None:
    assert api.post("/admin/cleanup-jobs?older_than_hours=-1").status_code == 400
    assert api.post("/admin/cleanup-jobs").json() == {"removed_jobs": 0, "removed_files": 0}


def test_fastapi_mode_serves_no_mcp(tmp_path: Path) -> None:
    settings = Settings(device="cpu", mode="fastapi", max_workers=1, spare_workers=False,
                        job_store_path=tmp_path / "j.db", job_dir=tmp_path / "jobs")
    paths = {r.path for r in create_app(settings).routes}
    assert {"/evaluate", "/compare/batch"} <= paths and "/mcp" not in paths


def test_mcp_mode_serves_no_rest_routes_but_health(tmp_path: Path) -> None:
    settings = Settings(device="cpu", mode="mcp", job_store_path=tmp_path / "j.db",
                        job_dir=tmp_path / "jobs")
    app = create_app(settings)
    paths = {r.path for r in app.routes}
    assert "/mcp" in paths and "/health" in paths
    assert set(app.openapi()["paths"]) == {"/health", "/metrics"}


def test_the_server_process_never_imports_the_gpu_stack() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from app import create_app; from shared.settings import Settings; "
        "create_app(Settings(device='cpu')); "
        "print(sorted(m for m in ('torch', 'triton', 'cupy') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
