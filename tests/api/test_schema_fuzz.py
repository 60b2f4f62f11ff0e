"""Schemathesis against the app's own OpenAPI schema, in CPU mode: no answer is a 5xx, and
every answer conforms to the schema (a documented status code, its content type, a body that
matches its model, its declared headers).

Bounded for CI (2 cores; about a minute). The app runs in-process: schemathesis drives the ASGI
app, lifespan included, with two CPU device slots and at most four waiting jobs. Each operation
gets FUZZ_EXAMPLES valid and (where invalid ones exist) FUZZ_EXAMPLES invalid generated requests,
derandomized so that CI runs are repeatable. Schemathesis' coverage phase (every boundary value of every field: hundreds
of requests, many of them valid jobs) and stateful phase are not run. Valid job requests do run
real workers: generated source code does not compile, so such a job ends quickly with a
compile_error verdict, and a burst of them beyond the queue limit is answered 429, which the
schema documents.

The operations are driven through ``APIOperation.as_strategy`` with Hypothesis directly rather
than ``schema.parametrize()``: the latter's lazy fixture loader relies on a pytest internal
that pytest 9.2 removed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

# The test extra has it (CI); a GPU host's image need not.
pytest.importorskip("schemathesis", reason="needs the test extra: pip install -e '.[test]'")

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.python.asgi import shutdown_lifespans
from schemathesis.schemas import BaseSchema
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app import create_app
from shared.settings import Settings

FUZZ_EXAMPLES = 8
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]
# Every operation of the schema (a test below keeps this list complete).
OPERATIONS = [
    "GET /health",
    "GET /metrics",
    "POST /evaluate",
    "POST /compare",
    "POST /compare/batch",
    "POST /validate",
    "POST /",
    "GET /job/{job_id}",
    "GET /job/{job_id}/log",
    "GET /stats",
    "POST /admin/cleanup-jobs",
]


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BaseSchema]:
    state = tmp_path_factory.mktemp("fuzz")
    app = create_app(Settings(
        device="cpu", mode="fastapi", max_workers=2, max_queued_jobs=4,
        job_store_path=state / "jobs.db", job_dir=state / "jobs",
        build_cache_dir=state / "cache",
    ))  # fmt: skip
    yield schemathesis.openapi.from_asgi("/openapi.json", app)
    shutdown_lifespans()  # ends the app's lifespan: stops its workers


def test_the_fuzzed_operations_are_every_operation_of_the_schema(api_schema: BaseSchema) -> None:
    labels = {result.ok().label for result in api_schema.get_all_operations()}
    assert labels == set(OPERATIONS)


# Operations whose every request is valid (no parameters, or one free-form path string).
ALWAYS_VALID = {"GET /health", "GET /metrics", "GET /stats", "GET /job/{job_id}",
                "GET /job/{job_id}/log"}
CASES = [(label, GenerationMode.POSITIVE) for label in OPERATIONS] + [
    (label, GenerationMode.NEGATIVE) for label in OPERATIONS if label not in ALWAYS_VALID
]


@pytest.mark.parametrize(("label", "mode"), CASES)
def test_every_answer_conforms_to_the_schema_and_none_is_a_server_error(
    api_schema: BaseSchema, label: str, mode: GenerationMode
) -> None:
    operation = api_schema.find_operation_by_label(label)
    assert operation is not None, label

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True, database=None,
        suppress_health_check=list(HealthCheck),
    )
    def answer_conforms(case: schemathesis.Case) -> None:
        case.call_and_validate(checks=CHECKS)

    answer_conforms()
