"""The optional API key: every route but /health needs it once API_KEY is set."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app import create_app
from shared.settings import Settings

KEY = "s3cret-key"


def settings(tmp_path: Path, api_key: str | None) -> Settings:
    return Settings(
        device="cpu", mode="both", max_workers=1, spare_workers=False, api_key=api_key,
        job_store_path=tmp_path / "jobs.db", job_dir=tmp_path / "jobs",
        build_cache_dir=tmp_path / "cache",
    )


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    # One app for the module: starting one (and its workers) takes seconds.
    with TestClient(create_app(settings(tmp_path_factory.mktemp("auth"), KEY))) as client:
        yield client


PROTECTED = [
    ("GET", "/stats"),
    ("GET", "/metrics"),
    ("GET", "/docs"),
    ("GET", "/redoc"),
    ("GET", "/docs/static/swagger-ui-bundle.js"),
    ("GET", "/openapi.json"),
    ("GET", "/job/some-id"),
    ("GET", "/job/some-id/log"),
    ("POST", "/evaluate"),
    ("POST", "/compare"),
    ("POST", "/validate"),
    ("POST", "/"),
    ("POST", "/admin/cleanup-jobs"),
    ("POST", "/mcp"),
    ("GET", "/mcp"),
]


def test_health_stays_open(api: TestClient) -> None:
    assert api.get("/health").status_code == 200


@pytest.mark.parametrize(("method", "path"), PROTECTED)
def test_every_other_route_needs_the_key(api: TestClient, method: str, path: str) -> None:
    r = api.request(method, path, json={})
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert "API key" in r.json()["detail"]


@pytest.mark.parametrize(
    "header", [f"Bearer {KEY}x", "Bearer s3cret-ke", f"Basic {KEY}", "Bearer", KEY]
)
def test_a_wrong_key_or_scheme_is_refused(api: TestClient, header: str) -> None:
    r = api.get("/stats", headers={"Authorization": header})
    assert r.status_code == 401


def test_a_wrong_key_is_reported_as_an_invalid_token(api: TestClient) -> None:
    r = api.get("/stats", headers={"Authorization": "Bearer nope"})
    assert 'error="invalid_token"' in r.headers["www-authenticate"]


@pytest.mark.parametrize(("method", "path"), [("GET", "/stats"), ("GET", "/metrics"),
                                              ("GET", "/openapi.json"), ("GET", "/docs"),
                                              ("GET", "/docs/static/swagger-ui.css"),
                                              ("POST", "/admin/cleanup-jobs")])
def test_the_right_key_opens_the_route(api: TestClient, method: str, path: str) -> None:
    r = api.request(method, path, headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 200, r.text


def test_the_scheme_name_is_case_insensitive(api: TestClient) -> None:
    assert api.get("/stats", headers={"Authorization": f"bearer {KEY}"}).status_code == 200


def test_mcp_with_the_key_reaches_the_mcp_transport(api: TestClient) -> None:
    r = api.post(
        "/mcp", headers={"Authorization": f"Bearer {KEY}", "Accept": "application/json"},
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
    )
    assert r.status_code != 401  # the transport itself answers (it wants a session first)


def test_without_api_key_nothing_needs_one(tmp_path: Path) -> None:
    with TestClient(create_app(settings(tmp_path, None))) as client:
        assert client.get("/stats").status_code == 200
        assert client.post("/admin/cleanup-jobs").status_code == 200
