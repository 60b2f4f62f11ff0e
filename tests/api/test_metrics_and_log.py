"""GET /metrics (Prometheus text) and GET /job/{id}/log (a job's kept worker output)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app import create_app
from orchestration.job_manager import JobManager
from orchestration.output_capture import OutputCapture, worker_log_path
from shared.settings import Settings

FAMILIES = {
    "kernel_eval_jobs_queued", "kernel_eval_jobs_rejected", "kernel_eval_jobs",
    "kernel_eval_queue_length", "kernel_eval_stage_duration_seconds",
    "kernel_eval_gpu_busy_ratio", "kernel_eval_workers", "kernel_eval_cache_lookups",
}


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    # One app for the module: starting one (and its workers) takes seconds.
    tmp_path = tmp_path_factory.mktemp("api")
    settings = Settings(
        device="cpu", mode="fastapi", max_workers=1, spare_workers=False,
        job_store_path=tmp_path / "jobs.db", job_dir=tmp_path / "jobs",
        build_cache_dir=tmp_path / "cache",
    )
    with TestClient(create_app(settings)) as client:
        yield client


def manager_of(api: TestClient) -> JobManager:
    manager = api.app.state.kes.manager  # type: ignore[attr-defined]
    assert manager is not None
    return manager


def test_metrics_are_prometheus_text_with_every_family(api: TestClient) -> None:
    r = api.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    assert FAMILIES <= set(families)
    assert families["kernel_eval_stage_duration_seconds"].type == "histogram"
    assert families["kernel_eval_jobs"].type == "counter"


def test_queue_length_is_read_at_scrape_time(
    api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    queued = [2]
    monkeypatch.setattr(manager_of(api), "queue_length", lambda: queued[0])

    def scraped() -> float:
        text = api.get("/metrics").text
        families = {f.name: f for f in text_string_to_metric_families(text)}
        return families["kernel_eval_queue_length"].samples[0].value

    assert scraped() == 2
    queued[0] = 7
    assert scraped() == 7


def test_the_job_log_serves_the_kept_output(api: TestClient) -> None:
    manager = manager_of(api)
    manager.store.add("job-1", "evaluate", "{}")
    capture = OutputCapture(head_bytes=16, tail_bytes=16)
    capture.feed(b"first line\n" + b"." * 1000 + b"\nlast line\n")
    path = worker_log_path(manager.settings.job_dir, "job-1")
    path.parent.mkdir(parents=True)
    capture.save(path)

    r = api.get("/job/job-1/log")

    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    assert r.text.startswith("first line\n")
    assert "bytes omitted" in r.text and r.text.endswith("last line\n")


def test_a_job_without_output_has_an_empty_log(api: TestClient) -> None:
    manager_of(api).store.add("job-2", "evaluate", "{}")
    r = api.get("/job/job-2/log")
    assert r.status_code == 200 and r.text == ""


@pytest.mark.parametrize("job_id", ["unknown", "..%2F..%2Fetc", "%2E%2E"])
def test_the_log_of_an_unknown_job_is_404(api: TestClient, job_id: str) -> None:
    assert api.get(f"/job/{job_id}/log").status_code == 404


def test_job_log_never_reads_outside_the_job_directory(api: TestClient) -> None:
    manager = manager_of(api)
    job_dir = manager.settings.job_dir
    (job_dir.parent / "worker.log").write_text("secret")  # what "<job_dir>/../worker.log" is
    (job_dir.parent / "other").mkdir()
    (job_dir.parent / "other" / "worker.log").write_text("secret")
    assert manager.job_log("..") is None
    assert manager.job_log("../other") is None
