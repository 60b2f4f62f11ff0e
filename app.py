"""The FastAPI application: routes only. Jobs are run by ``orchestration.JobManager``.

Resources (the device probe, the job store, the job manager, the MCP session manager) are
created in the lifespan and reached through dependencies.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse

from orchestration.device_probe import probe_device
from orchestration.job_manager import JobManager, JobOutcome
from orchestration.job_store import JobStore
from shared.models import (
    CleanupResponse,
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
from shared.settings import Settings

log = logging.getLogger("kernel_eval.app")

EVALUATE_FIELDS = set(EvaluationResponse.model_fields)


@dataclass
class AppState:
    """Everything the routes may touch; lives on ``app.state.kes``."""

    settings: Settings
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


def create_app(settings: Settings) -> FastAPI:
    state = AppState(settings)
    current_manager = state.current_manager

    mcp_lifespan = None
    if settings.mode in ("mcp", "both"):
        from mcp_server import create_mcp_server, mount_mcp

        mcp_app_server = create_mcp_server(current_manager, settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        device = await probe_device(settings)
        log.info(
            "device: %s%s", device.device,
            f" ({', '.join(f'{g.id}: {g.name}' for g in device.gpus)})" if device.gpus else "",
        )
        store = JobStore(settings.job_store_path)
        manager = JobManager(settings, device, store)
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

    app = FastAPI(
        title="Kernel Evaluation Server",
        description="Compile, check and time GPU kernels (torch, torch_cuda, triton, cuda, "
        "multi_kernel). MCP (Streamable HTTP) at /mcp.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.kes = state
    if settings.mode in ("mcp", "both"):
        mcp_lifespan = mount_mcp(app, mcp_app_server)

    @app.exception_handler(Exception)
    async def server_fault(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(status_code=500, content={"detail": f"internal server error: {exc}"})

    @app.get("/health", response_model=HealthResponse)
    async def health(manager: Manager) -> HealthResponse:
        return manager.health()

    if settings.mode == "mcp":
        return app

    @app.post("/evaluate", response_model=EvaluationResponse)
    async def evaluate(request: EvaluationRequest, manager: Manager, wait: Wait = True) -> JSONResponse:
        """Compile, run and time one kernel.

        With ``wait=false`` the answer is 202 with the job id at once; poll ``/job/{job_id}``.
        """
        job_id, outcome = manager.start_evaluate(request)
        if not wait:
            return _accepted(manager, job_id)
        return _respond(await outcome, EVALUATE_FIELDS)

    @app.post("/compare", response_model=CompareResponse)
    async def compare(request: CompareRequest, manager: Manager, wait: Wait = True) -> JSONResponse:
        """Check a custom kernel against a reference on identical inputs, then time both.

        With ``wait=false`` the answer is 202 with the job id at once; poll ``/job/{job_id}``.
        """
        job_id, outcome = manager.start_compare(request)
        if not wait:
            return _accepted(manager, job_id)
        return _respond(await outcome)

    @app.post("/validate", response_model=EvaluationResponse)
    async def validate(request: ValidateRequest, manager: Manager) -> JSONResponse:
        """Compile and run a kernel once, without timing."""
        return _respond(await manager.validate(request.kernel, request.timeout), EVALUATE_FIELDS)

    @app.post("/", response_model=CompareResponse, summary="Legacy {ref_code, custom_code}")
    async def legacy(request: LegacyCompareRequest, manager: Manager) -> JSONResponse:
        """The old request form; treated as /compare with a torch reference and torch_cuda custom."""
        return _respond(await manager.compare(request.to_compare()))

    @app.get("/job/{job_id}", response_model=JobStatusResponse)
    async def job(job_id: str, manager: Manager) -> JobStatusResponse:
        status = manager.job_status(job_id)
        if status is None:
            raise HTTPException(status_code=404, detail=f"no job with id {job_id}")
        return status

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

    return app


def _accepted(manager: JobManager, job_id: str) -> JSONResponse:
    status = manager.job_status(job_id)
    assert status is not None
    return JSONResponse(status_code=202, content=status.model_dump(mode="json"))


def _respond(outcome: JobOutcome, fields: set[str] | None = None) -> JSONResponse:
    content: dict[str, Any] = outcome.response.model_dump(mode="json", include=fields)
    return JSONResponse(status_code=outcome.http_status, content=content)


def app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory app:app_from_env`` (used by ``main.py --reload``)."""
    return create_app(Settings.from_env())
