"""How much of a request the server reads (MAX_REQUEST_BYTES, 413) and echoes back (a 400's
``input``), on the real app with a fake executor."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from app import create_app
from shared.settings import Settings
from tests.api.test_compare_batch import serve_in_thread
from tests.fake_executor import FakeExecutor

LIMIT = 64 * 1024
TORCH = "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
# An invalid request's answer quotes at most a short excerpt of what was sent.
SHORT_ANSWER_BYTES = 2000


def settings(state: Path, **changes: object) -> Settings:
    return Settings(
        device="cpu", mode="both", job_store_path=state / "jobs.db", job_dir=state / "jobs",
        build_cache_dir=state / "cache", ref_cache_dir=state / "refs",
    ).with_overrides(**changes)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    state = tmp_path_factory.mktemp("limit")
    app = create_app(settings(state, max_request_bytes=LIMIT), executor=FakeExecutor())
    with serve_in_thread(app) as served:
        yield served


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The app with the default limit (32 MiB)."""
    state = tmp_path_factory.mktemp("default")
    with TestClient(create_app(settings(state), executor=FakeExecutor())) as client:
        yield client


def evaluate_body(source: str) -> dict[str, object]:
    return {"kernel": {"source_code": source, "kernel_type": "torch"}, "num_trials": 3}


def assert_names_the_limit(response: httpx.Response) -> None:
    assert response.status_code == 413, response.text
    detail = response.json()["detail"]
    assert "65,536 bytes (64 KiB)" in detail and "MAX_REQUEST_BYTES" in detail


def test_a_body_whose_content_length_passes_the_limit_is_refused_with_413(url: str) -> None:
    response = httpx.post(f"{url}/evaluate", json=evaluate_body("x" * LIMIT), timeout=30)

    assert_names_the_limit(response)
    assert "a body of 65,6" in response.json()["detail"]  # its declared size


def test_a_declared_length_over_the_limit_is_answered_before_any_body_is_sent(url: str) -> None:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /evaluate HTTP/1.1\r\nHost: localhost\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n")
        head = sock.recv(4096)

    assert head.startswith(b"HTTP/1.1 413 "), head
    assert b"connection: close" in head.lower()


@pytest.mark.parametrize("path", ["/evaluate", "/compare/batch", "/mcp"])
def test_a_chunked_body_is_refused_once_its_bytes_pass_the_limit(url: str, path: str) -> None:
    sent = 0

    def gigabyte() -> Iterator[bytes]:  # no Content-Length: sent chunked
        nonlocal sent
        for _ in range(2**14):
            sent += 2**16
            yield b" " * 2**16

    response = httpx.post(
        f"{url}{path}", content=gigabyte(), timeout=30,
        headers={"Content-Type": "application/json",
                 "Accept": "application/json, text/event-stream"},
    )

    assert_names_the_limit(response)
    assert "a body of more than 65,536 bytes" in response.json()["detail"]
    # The server stopped reading at the limit and closed: the client never sent the gigabyte.
    assert sent < 64 * 2**20


def test_a_body_under_the_limit_is_served(url: str) -> None:
    response = httpx.post(f"{url}/evaluate", json=evaluate_body(TORCH + "#" * (LIMIT - 500)),
                          timeout=30)

    assert response.status_code == 200, response.text


def test_an_invalid_huge_source_is_answered_with_an_excerpt(api: TestClient) -> None:
    response = api.post("/evaluate", json=evaluate_body("x" * 20 * 2**20))

    assert response.status_code == 400
    assert len(response.content) < SHORT_ANSWER_BYTES, len(response.content)
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "kernel", "source_code"]
    assert error["input"].startswith("x" * 200)
    assert "20,971,520 characters in all" in error["input"]


def test_a_batch_of_1001_kernels_is_refused_without_repeating_them(api: TestClient) -> None:
    kernel = {"source_code": TORCH, "kernel_type": "torch"}
    response = api.post("/compare/batch",
                        json={"ref_kernel": kernel, "custom_kernels": [kernel] * 1001})

    assert response.status_code == 400
    assert len(response.content) < SHORT_ANSWER_BYTES, len(response.content)
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "custom_kernels"] and "not 1001" in error["msg"]
    assert error["input"].startswith("a list of 1,001 items")


def test_a_missing_field_quotes_the_body_it_is_missing_from_in_short(api: TestClient) -> None:
    response = api.post("/compare", json={"ref_kernel": {"source_code": "z" * 5000,
                                                         "kernel_type": "torch"}})

    assert response.status_code == 400
    assert len(response.content) < SHORT_ANSWER_BYTES, len(response.content)
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "custom_kernel"]
    assert error["input"].startswith("an object with keys ref_kernel")


def test_a_short_input_is_quoted_as_it_was_sent(api: TestClient) -> None:
    response = api.post("/evaluate", json={"kernel": {"source_code": "x", "kernel_type": "nope"}})

    assert response.status_code == 400
    assert response.json()["detail"][0]["input"] == "nope"
