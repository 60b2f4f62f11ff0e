"""The bounded queue: at MAX_QUEUED_JOBS waiting jobs, submissions get 429 and Retry-After."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app import create_app
from orchestration.job_manager import JobManager
from shared.settings import Settings

KERNEL = {
    "source_code": "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2",
    "kernel_type": "torch",
}
SUBMISSIONS = [
    ("/evaluate", {"kernel": KERNEL, "num_trials": 1}),
    ("/compare", {"ref_kernel": KERNEL, "custom_kernel": KERNEL, "num_trials": 1}),
    ("/validate", {"kernel": KERNEL}),
    ("/", {"ref_code": "x", "custom_code": "y"}),
]


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    # One app for the module: starting one (and its workers) takes seconds.
    tmp_path = tmp_path_factory.mktemp("api")
    settings = Settings(
        device="cpu", mode="fastapi", max_workers=1, spare_workers=False, max_queued_jobs=2,
        job_store_path=tmp_path / "jobs.db", job_dir=tmp_path / "jobs",
        build_cache_dir=tmp_path / "cache",
    )
    with TestClient(create_app(settings)) as client:
        yield client


def manager_of(api: TestClient) -> JobManager:
    manager = api.app.state.kes.manager  # type: ignore[attr-defined]
    assert manager is not None
    return manager


@pytest.mark.parametrize(("path", "body"), SUBMISSIONS)
def test_a_full_queue_answers_429_with_retry_after(
    api: TestClient, monkeypatch: pytest.MonkeyPatch, path: str, body: dict[str, object]
) -> None:
    manager = manager_of(api)
    monkeypatch.setattr(manager, "queue_length", lambda: 2)

    r = api.post(path, json=body)

    assert r.status_code == 429, r.text
    assert int(r.headers["retry-after"]) > 0
    assert "MAX_QUEUED_JOBS=2" in r.json()["detail"]
    assert manager.stats().jobs_queued == 0 and manager.stats().jobs_running == 0


def rejected(api: TestClient) -> dict[str, float]:
    return {
        s.labels["kind"]: s.value
        for family in text_string_to_metric_families(api.get("/metrics").text)
        for s in family.samples
        if s.name == "kernel_eval_jobs_rejected_total"
    }


def test_refusals_are_counted_in_the_metrics(
    api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(manager_of(api), "queue_length", lambda: 5)
    before = rejected(api)
    for path, body in SUBMISSIONS:
        api.post(path, json=body)
    after = rejected(api)
    moved = {kind: after[kind] - before.get(kind, 0.0) for kind in after}
    assert moved == {"evaluate": 1, "compare": 2, "validate": 1}


def test_a_queue_below_its_limit_accepts_jobs(
    api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = manager_of(api)
    monkeypatch.setattr(manager, "queue_length", lambda: 1)
    r = api.post("/validate", json={"kernel": KERNEL})
    assert r.status_code == 200, r.text
    assert manager.job_status(r.json()["job_id"]) is not None


def test_reads_are_never_refused(api: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manager_of(api), "queue_length", lambda: 99)
    assert api.get("/stats").status_code == 200
    assert api.get("/job/unknown").status_code == 404
