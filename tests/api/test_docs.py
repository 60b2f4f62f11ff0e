"""/docs and /redoc load everything from this server: no CDN, so they work offline."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app import create_app
from shared.settings import Settings
from tests.fake_executor import FakeExecutor

CONTENT_TYPES = {".js": "javascript", ".css": "text/css", ".png": "image/png"}


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    state = tmp_path_factory.mktemp("docs")
    settings = Settings(
        device="cpu", mode="both", job_store_path=state / "jobs.db", job_dir=state / "jobs",
        build_cache_dir=state / "cache", ref_cache_dir=state / "refs",
    )
    with TestClient(create_app(settings, executor=FakeExecutor())) as client:
        yield client


def assets(html: str) -> list[str]:
    return re.findall(r'(?:src|href)="([^"]+)"', html)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_docs_page_names_no_url_of_another_host(api: TestClient, page: str) -> None:
    response = api.get(page)

    assert response.status_code == 200
    assert re.search(r"https?:|//[a-z]", response.text, re.IGNORECASE) is None, response.text
    assert any(url.endswith(".js") for url in assets(response.text))


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_every_asset_of_the_docs_page_is_served_with_its_content_type(
    api: TestClient, page: str
) -> None:
    urls = assets(api.get(page).text)

    assert urls
    for url in urls:
        response = api.get(url)
        assert response.status_code == 200, url
        suffix = url[url.rfind("."):]
        assert CONTENT_TYPES[suffix] in response.headers["content-type"], url
        assert len(response.content) > 1000, url


def test_the_swagger_ui_served_renders_openapi_3_1(api: TestClient) -> None:
    # FastAPI's schema is OpenAPI 3.1, which Swagger UI renders from version 5 on (its
    # OAS 3.1 plugin); a 4.x bundle shows "Unable to render this definition" instead.
    bundle = next(url for url in assets(api.get("/docs").text) if url.endswith("bundle.js"))

    assert api.get("/openapi.json").json()["openapi"].startswith("3.1")
    assert "isOAS31" in api.get(bundle).text
