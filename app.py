"""The FastAPI application: routes only. Jobs are run by ``orchestration.JobManager``.

Resources (the device probe, the job store, the job manager, the MCP session manager) are
created in the lifespan and reached through dependencies.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any, TypeAlias

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from orchestration.admission import Admission
from orchestration.batch import Batch
from orchestration.device_probe import probe_device
from orchestration.executor import Executor
from orchestration.job_manager import JobManager, JobOutcome
from orchestration.job_store import JobStore
from orchestration.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from orchestration.metrics import Metrics
from shared.auth import ApiKeyMiddleware
from shared.models import (
    CleanupResponse,
    CompareBatchRequest,
    CompareBatchResult,
    CompareBatchSummary,
    CompareRequest,
    CompareResponse,
    EvaluationRequest,
    EvaluationResponse,
    HealthResponse,
    JobStatusResponse,
    LegacyCompareRequest,
    StatsResponse,
    ValidateRequest,
)
from shared.request_limits import BodySizeLimitMiddleware, excerpt
from shared.settings import Settings

log = logging.getLogger("kernel_eval.app")

EVALUATE_FIELDS = set(EvaluationResponse.model_fields)
DOCS_STATIC_PATH = "/docs/static"
INVALID_REQUEST_STATUS = 400  # the seeds' server's answer to an invalid request
JobRequest: TypeAlias = EvaluationRequest | CompareRequest | ValidateRequest | LegacyCompareRequest


@dataclass
class AppState:
    """Everything the routes may touch; lives on ``app.state.kes``."""

    settings: Settings
    metrics: Metrics
    admission: Admission
    manager: JobManager | None = None

    def current_manager(self) -> JobManager:
        if self.manager is None:
            raise HTTPException(status_code=503, detail="the server is starting or stopping")
        return self.manager


def get_manager(request: Request) -> JobManager:
    state: AppState = request.app.state.kes
    return state.current_manager()


Manager = Annotated[JobManager, Depends(get_manager)]
Wait = Annotated[bool, Query(description="false: answer 202 with the job id at once")]


def admitted(kind: str) -> Callable[[Request], JobManager]:
    """A dependency: the manager, unless the queue is full (then 429 with Retry-After)."""

    def admit_one(request: Request) -> JobManager:
        return admit(request, kind)

    return admit_one


def admit(request: Request, kind: str, count: int = 1) -> JobManager:
    """The manager, if ``count`` more jobs may be queued; else 429 with Retry-After (or 503)."""
    state: AppState = request.app.state.kes
    manager = state.current_manager()
    if not manager.accepting:
        raise HTTPException(status_code=503, detail="the server is shutting down",
                            headers={"Retry-After": "30"})
    full = state.admission.check(manager, kind, count)
    if full is not None:
        raise HTTPException(
            status_code=429, detail=full.message(),
            headers={"Retry-After": str(full.retry_after_s)},
        )
    return manager


class NDJSONResponse(StreamingResponse):
    """A stream of JSON documents, one a line."""

    media_type = "application/x-ndjson"


ERROR_SCHEMA = {
    "type": "object", "properties": {"detail": {"type": "string"}}, "required": ["detail"],
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"description": "No such job", "content": {"application/json": {"schema": ERROR_SCHEMA}}}
}


def job_responses(
    model: type[BaseModel], *, accepts_wait: bool = True
) -> dict[int | str, dict[str, Any]]:
    """The answers of a job route besides 200 and the invalid-request one, for OpenAPI."""
    accepted: dict[int | str, dict[str, Any]] = {
        202: {"model": JobStatusResponse, "description": "`wait=false`: the job is queued"},
    }
    return {
        **(accepted if accepts_wait else {}),
        408: {"model": model, "description": "The job ran past its timeout and was killed"},
        429: {
            "description": "Too many jobs are queued (MAX_QUEUED_JOBS); retry after Retry-After",
            "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds"}},
            "content": {"application/json": {"schema": ERROR_SCHEMA}},
        },
        500: {"model": model, "description": "The server could not finish the job"},
    }


BATCH_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "NDJSON: a CompareBatchResult line per candidate as its job finishes "
        "(its `status_code` is what /compare would have answered), then a CompareBatchSummary "
        "line",
    },
    429: job_responses(CompareResponse)[429],
}


def create_app(settings: Settings, *, executor: Executor | None = None) -> FastAPI:
    """The app. ``executor`` replaces the local one (tests pass a fake)."""
    metrics = Metrics()
    state = AppState(settings, metrics, Admission(settings.max_queued_jobs, metrics))
    current_manager = state.current_manager

    def refresh_queue_length() -> None:
        if state.manager is not None:
            metrics.set_queue_length(state.manager.queue_length())

    metrics.add_refresher(refresh_queue_length)

    mcp_lifespan = None
    if settings.mode in ("mcp", "both"):
        from mcp_server import create_mcp_server, mount_mcp

        mcp_app_server = create_mcp_server(current_manager, settings, admission=state.admission)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runs_jobs = executor
        if executor is None and settings.executor == "ray":
            from orchestration.ray_executor import connect

            cluster = await connect(settings)  # the cluster's GPUs, not this host's
            device, runs_jobs = cluster.device_info(), cluster
        else:
            device = await probe_device(settings)
        log.info(
            "device: %s%s", device.device,
            f" ({', '.join(f'{g.id}: {g.name}' for g in device.gpus)})" if device.gpus else "",
        )
        store = JobStore(settings.job_store_path)
        manager = JobManager(settings, device, store, executor=runs_jobs, metrics=metrics)
        async with AsyncExitStack() as stack:
            await manager.start()
            stack.callback(store.close)
            stack.push_async_callback(manager.close)
            if mcp_lifespan is not None:
                await stack.enter_async_context(mcp_lifespan)
            state.manager = manager
            try:
                yield
            finally:
                state.manager = None

    # /docs and /redoc with Swagger UI and ReDoc from fastapi-offline's own files under
    # /docs/static, not FastAPI's CDN: they load on a host without internet access. (Its
    # Swagger UI is 5.x, which renders FastAPI's OpenAPI 3.1; swagger-ui-bundle's 4.x cannot.)
    app = FastAPIOffline(
        static_url=DOCS_STATIC_PATH,
        title="Kernel Evaluation Server",
        description="Compile, check and time GPU kernels (torch, torch_cuda, triton, cuda, "
        "multi_kernel). MCP (Streamable HTTP) at /mcp.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.kes = state
    if settings.mode in ("mcp", "both"):
        mcp_lifespan = mount_mcp(app, mcp_app_server)
    if settings.api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=settings.api_key)
    # Added last, so it runs first: an oversized body is refused before anything reads it.
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_request_bytes)

    _add_error_handlers(app)
    _document_invalid_request_status(app)

    @app.get("/health", response_model=HealthResponse)
    async def health(manager: Manager) -> HealthResponse:
        return manager.health()

    @app.get("/metrics", response_class=PlainTextResponse)
    async def prometheus_metrics() -> Response:
        """Prometheus metrics in the text exposition format."""
        return Response(metrics.render(), media_type=METRICS_CONTENT_TYPE)

    if settings.mode == "mcp":
        return app

    _add_job_routes(app)
    _add_job_state_routes(app)
    return app


def _add_error_handlers(app: FastAPI) -> None:
    """A server fault is a 500 naming it; an invalid request is 400 naming the field."""

    @app.exception_handler(Exception)
    async def server_fault(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(status_code=500, content={"detail": f"internal server error: {exc}"})

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's body (``detail``: one entry per field, with its ``loc``), under the seeds'
        # status, 400, not FastAPI's 422. The value each entry quotes (``input``) is cut
        # short: it may be a megabyte of source.
        errors = [{**error, "input": excerpt(error["input"])} if "input" in error else error
                  for error in exc.errors()]
        return JSONResponse(
            status_code=INVALID_REQUEST_STATUS,
            content={"detail": jsonable_encoder(errors)},
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 400 and isinstance(exc.detail, str):
            # FastAPI's answer to a body it cannot even decode: an invalid request like the
            # rest, under the same status and in the same shape.
            error = {"type": "body_invalid", "loc": ["body"], "msg": exc.detail, "input": None}
            return JSONResponse(status_code=INVALID_REQUEST_STATUS, content={"detail": [error]})
        return await http_exception_handler(request, exc)


def _add_job_routes(app: FastAPI) -> None:
    """The routes that queue jobs: /evaluate, /compare, /compare/batch, /validate, legacy /."""

    @app.post(
        "/evaluate", response_model=EvaluationResponse, responses=job_responses(EvaluationResponse)
    )
    async def evaluate(
        request: EvaluationRequest,
        manager: Annotated[JobManager, Depends(admitted("evaluate"))],
        wait: Wait = True,
    ) -> JSONResponse:
        """Compile, run and time one kernel.

        With ``wait=false`` the answer is 202 with the job id at once; poll ``/job/{job_id}``.
        """
        job_id, outcome = manager.start_evaluate(request)
        if not wait:
            return _accepted(manager, job_id, request)
        return _respond(await outcome, request, EVALUATE_FIELDS)

    @app.post("/compare", response_model=CompareResponse, responses=job_responses(CompareResponse))
    async def compare(
        request: CompareRequest,
        manager: Annotated[JobManager, Depends(admitted("compare"))],
        wait: Wait = True,
    ) -> JSONResponse:
        """Check a custom kernel against a reference on identical inputs, then time both.

        With ``wait=false`` the answer is 202 with the job id at once; poll ``/job/{job_id}``.
        """
        job_id, outcome = manager.start_compare(request)
        if not wait:
            return _accepted(manager, job_id, request)
        return _respond(await outcome, request)

    @app.post("/compare/batch", response_class=NDJSONResponse, responses=BATCH_RESPONSES)
    async def compare_batch(request: CompareBatchRequest, http: Request) -> NDJSONResponse:
        """Check many custom kernels against one reference; stream each answer as it finishes.

        Every candidate is an ordinary /compare job (with the parameters given here, visible
        at ``/job/{job_id}``). All are queued at once, in order, or none are: 429 when they
        would take the queue past MAX_QUEUED_JOBS. The answer is NDJSON: one
        ``{"index", "job_id", "state", "status_code", "response"}`` line per candidate in the
        order they finish, then ``{"done": true, "count", "summary"}``. A client that
        disconnects cancels none of the jobs.
        """
        batch = Batch.start(admit(http, "compare", len(request.custom_kernels)), request)
        return NDJSONResponse(_batch_lines(batch, request))

    @app.post(
        "/validate", response_model=EvaluationResponse, responses=job_responses(EvaluationResponse)
    )
    async def validate(
        request: ValidateRequest,
        manager: Annotated[JobManager, Depends(admitted("validate"))],
        wait: Wait = True,
    ) -> JSONResponse:
        """Compile and run a kernel once, without timing.

        With ``wait=false`` the answer is 202 with the job id at once; poll ``/job/{job_id}``.
        """
        job_id, outcome = manager.start_validate(request.kernel, request.timeout)
        if not wait:
            return _accepted(manager, job_id, request)
        return _respond(await outcome, request, EVALUATE_FIELDS)

    @app.post(
        "/", response_model=CompareResponse, summary="Legacy {ref_code, custom_code}",
        responses=job_responses(CompareResponse, accepts_wait=False),
    )
    async def legacy(
        request: LegacyCompareRequest,
        manager: Annotated[JobManager, Depends(admitted("compare"))],
    ) -> JSONResponse:
        """The old request form; treated as /compare with a torch reference and torch_cuda custom."""
        return _respond(await manager.compare(request.to_compare()), request)


def _add_job_state_routes(app: FastAPI) -> None:
    """The routes that read what the jobs left: /job/{id}, its log, /stats, cleanup."""

    @app.get("/job/{job_id}", response_model=JobStatusResponse, responses=NOT_FOUND)
    async def job(job_id: str, manager: Manager) -> JobStatusResponse:
        status = manager.job_status(job_id)
        if status is None:
            raise HTTPException(status_code=404, detail=f"no job with id {job_id}")
        return status

    @app.get("/job/{job_id}/log", response_class=PlainTextResponse, responses=NOT_FOUND)
    async def job_log(job_id: str, manager: Manager) -> PlainTextResponse:
        """The job's worker output (stdout and stderr) as kept: its first and last 512 KB, with
        a marker line saying how many bytes in between were left out. Empty until the worker
        has printed something."""
        if manager.job_status(job_id) is None:
            raise HTTPException(status_code=404, detail=f"no job with id {job_id}")
        return PlainTextResponse(manager.job_log(job_id) or "")

    @app.get("/stats", response_model=StatsResponse)
    async def stats(manager: Manager) -> StatsResponse:
        return manager.stats()

    @app.post("/admin/cleanup-jobs", response_model=CleanupResponse)
    async def cleanup(
        manager: Manager,
        older_than_hours: Annotated[float | None, Query(ge=0)] = None,
    ) -> CleanupResponse:
        """Remove finished jobs (and their files) older than ``older_than_hours``."""
        return manager.cleanup(older_than_hours)


def _document_invalid_request_status(app: FastAPI) -> None:
    """FastAPI documents an invalid request as 422 on every route; say the status it gets."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            for item in generate().get("paths", {}).values():
                for operation in item.values():
                    responses = operation.get("responses", {})
                    if "422" in responses:
                        responses[str(INVALID_REQUEST_STATUS)] = responses.pop("422")
        return app.openapi_schema or generate()

    app.openapi = openapi  # type: ignore[method-assign]


def _accepted(manager: JobManager, job_id: str, request: JobRequest) -> JSONResponse:
    status = manager.job_status(job_id)
    assert status is not None
    content = {**status.model_dump(mode="json"), "warnings": _warnings(request)}
    return JSONResponse(status_code=202, content=content)


def _respond(
    outcome: JobOutcome, request: JobRequest, fields: set[str] | None = None
) -> JSONResponse:
    content: dict[str, Any] = outcome.response.model_dump(mode="json", include=fields)
    content["warnings"] = _warnings(request)
    return JSONResponse(status_code=outcome.http_status, content=content)


def _warnings(request: JobRequest | CompareBatchRequest) -> list[str]:
    """The request's unknown keys: accepted and ignored, and named so a typo is visible."""
    return [_ignored(path) for path in request.ignored_fields()]


def _ignored(path: str) -> str:
    return f"unknown field '{path}' was ignored"


async def _batch_lines(batch: Batch, request: CompareBatchRequest) -> AsyncIterator[str]:
    """The NDJSON answer of /compare/batch: a line per finished job, then the summary."""
    paths = request.ignored_fields()
    results: list[CompareBatchResult] = []
    async for finished in batch.as_finished():
        own = f"custom_kernels.{finished.index}."
        warnings = [_ignored(p) for p in paths
                    if not p.startswith("custom_kernels.") or p.startswith(own)]
        outcome = finished.outcome
        result = CompareBatchResult(
            index=finished.index, job_id=finished.job_id, state=outcome.state,
            status_code=outcome.http_status,
            response=outcome.response.model_copy(update={"warnings": warnings}),
        )
        results.append(result)
        yield result.model_dump_json() + "\n"
    yield CompareBatchSummary.of(results, _warnings(request)).model_dump_json() + "\n"


def app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory app:app_from_env`` (used by ``main.py --reload``)."""
    return create_app(Settings.from_env())
