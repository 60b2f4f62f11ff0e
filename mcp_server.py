"""MCP tools over Streamable HTTP at ``/mcp``, served by the same FastAPI app and port as REST.

Five tools (``evaluate_kernel``, ``compare_kernels``, ``validate_kernel``, ``get_server_stats``,
``get_job_status``) call the same :class:`~orchestration.job_manager.JobManager` the REST routes
use. Arguments and results are the API's wire models, so every tool publishes an input and an
output schema.

What an agent gets back:

- a kernel's failure (compile error, wrong output, runtime error) is a normal result: the verdict
  is in ``kernel_exec_result.outcome`` with the full error message, first summarised in a line
  of text;
- a bad argument, a job that ran past its timeout, or a fault of the server is an error result
  (``isError``) whose text says what to change. Nothing waits forever: a job gets at most its
  timeout plus the worker grace plus :data:`QUEUE_ALLOWANCE_S` before the tool gives up.

Wiring (app.py)::

    server = create_mcp_server(state.current_manager, settings)
    mcp_lifespan = mount_mcp(app, server)  # adds the route GET/POST/DELETE /mcp
    ...                                    # and in the app's lifespan, once the manager exists:
    await stack.enter_async_context(mcp_lifespan)
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Literal, TypeVar

import anyio
from kernel_eval_client.models import MAX_SOURCE_BYTES
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, Field, ValidationError
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from io_contract import IOContract
from orchestration.admission import Admission
from shared.models import (
    MAX_TIMEOUT_S,
    CompareRequest,
    CompareResponse,
    EvaluationRequest,
    EvaluationResponse,
    HealthResponse,
    JobStatusResponse,
    KernelCode,
    KernelExecResult,
    KernelMetadata,
    KernelType,
    Outcome,
    StatsResponse,
)
from shared.settings import Settings

if TYPE_CHECKING:
    from fastapi import FastAPI

    from orchestration.job_manager import JobManager, JobOutcome

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"
# Kernel sources may be up to 1 MB and IOContracts may carry literal tensor data.
MAX_MCP_BODY_BYTES = 16 * 1024 * 1024
# Time a job may spend waiting for a free device before the tool stops waiting for it.
QUEUE_ALLOWANCE_S = 300.0
# Progress is re-sent this often while a job runs, so clients and proxies see it is alive.
HEARTBEAT_S = 10.0

LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")

ProgressFn = Callable[[str, float], Awaitable[None]]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
_LOG_LEVELS: tuple[LogLevel, ...] = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_Model = TypeVar("_Model", bound=BaseModel)

INSTRUCTIONS = """\
Compile, check and time GPU kernels (PyTorch, Triton, raw CUDA) on the server's GPUs
(or on its CPU in CPU mode: see get_server_stats for the device and the kernel types it runs).
- evaluate_kernel: time one kernel (does it compile and run, and how fast).
- compare_kernels: check a custom kernel against a reference on identical inputs, then time both.
- validate_kernel: quick check that a kernel compiles and runs once; no timing.
- get_server_stats: GPUs, supported kernel types, queue and job counters.
- get_job_status: look up a job by the job_id any of the tools above returned.
A kernel that fails to compile, crashes or gives wrong results is reported in the result
(kernel_exec_result.outcome and its error message), not as a tool error."""

# ---- argument types: the wire models, with descriptions an agent can act on -------------------

KernelSource = Annotated[
    str,
    Field(
        min_length=1, max_length=MAX_SOURCE_BYTES, description="Complete source code of the kernel."
    ),
]
KernelTypeArg = Annotated[
    KernelType,
    Field(
        description="torch: a torch.nn.Module `Model` (KernelBench format) or a function; "
        "torch_cuda: a `ModelNew` using torch.utils.cpp_extension.load_inline; "
        "triton: @triton.jit kernel(s); cuda: raw CUDA C++ __global__ kernel(s); "
        "multi_kernel: a Python script mixing them."
    ),
]
IOArg = Annotated[
    IOContract | None,
    Field(
        description="The kernel's arguments in call order, and its launch config. Required for "
        "triton and cuda; optional for torch/torch_cuda (else get_inputs() in the source is used)."
    ),
]
MetadataArg = Annotated[
    KernelMetadata | None,
    Field(
        description="Targeting: kernel_name (cuda/triton entry point; required for cuda), "
        "function_name / class_name / method_name (torch), compiler_options (cuda)."
    ),
]
NumTrials = Annotated[int, Field(ge=1, le=100_000, description="Timed samples to take.")]
NumCorrectTrials = Annotated[
    int, Field(ge=1, le=100, description="Correctness checks, each on freshly generated inputs.")
]
Tolerance = Annotated[
    float | None, Field(ge=0, description="Tolerance override (default: per-dtype defaults).")
]
TimeoutArg = Annotated[
    int, Field(ge=1, le=MAX_TIMEOUT_S, description="Seconds the job may run before it is killed.")
]


class ServerStatus(BaseModel):
    """Result of ``get_server_stats``: the server's health and its job counters."""

    health: HealthResponse
    stats: StatsResponse


class KernelEvalMCPServer(MCPServer):
    """The MCP server, plus the transport settings :func:`mount_mcp` serves it with."""

    def __init__(
        self,
        transport_security: TransportSecuritySettings,
        *,
        instructions: str,
        log_level: LogLevel,
    ) -> None:
        super().__init__("kernel-eval", instructions=instructions, log_level=log_level)
        self.transport_security = transport_security


def transport_security_for(settings: Settings) -> TransportSecuritySettings:
    """Host/Origin checks against DNS rebinding, from ``MCP_ALLOWED_HOSTS``/``MCP_ALLOWED_ORIGINS``.

    - localhost, 127.0.0.1 and [::1], on any port, are always allowed (the SDK's own default).
    - Each configured host is allowed in addition: a bare name (``kernels.example.com``) on any
      port or none, a name with a port (``kernels.example.com:8443``) on that port only, and
      ``name:*`` on any port. ``*`` turns the Host/Origin check off (for a server behind a
      proxy that checks them itself).
    - Origins default to ``http(s)://`` each allowed host; browsers send one, agents usually
      do not, and a request without an Origin is accepted.
    """
    if "*" in settings.mcp_allowed_hosts:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    hosts: list[str] = []
    for host in (*LOCAL_HOSTS, *settings.mcp_allowed_hosts):
        if host.endswith(":*") or (":" in host and not host.endswith("]")):
            hosts.append(host)
        else:
            hosts += [host, f"{host}:*"]
    origins = list(settings.mcp_allowed_origins) or [
        f"{scheme}://{host}" for host in hosts for scheme in ("http", "https")
    ]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )


def create_mcp_server(
    get_manager: Callable[[], JobManager],
    settings: Settings,
    *,
    heartbeat_s: float = HEARTBEAT_S,
    admission: Admission | None = None,
) -> MCPServer:
    """Build the MCP server with the five kernel tools.

    ``get_manager`` is called on every tool call (the JobManager is created in the app's
    lifespan, after this server). ``heartbeat_s`` is how often progress is re-sent while a job
    runs. ``admission`` refuses jobs while the queue is full (default: ``MAX_QUEUED_JOBS``,
    refusals not counted in any metrics).
    """
    level: LogLevel = next((lv for lv in _LOG_LEVELS if lv == settings.log_level.upper()), "INFO")
    server = KernelEvalMCPServer(
        transport_security_for(settings), instructions=INSTRUCTIONS, log_level=level
    )
    tools = KernelTools(
        get_manager, settings, heartbeat_s=heartbeat_s,
        admission=admission or Admission(settings.max_queued_jobs),
    )
    for tool in (
        tools.evaluate_kernel,
        tools.compare_kernels,
        tools.validate_kernel,
        tools.get_server_stats,
        tools.get_job_status,
    ):
        # cleandoc: the docstring is the description an agent reads, without the indentation.
        server.add_tool(tool, description=inspect.cleandoc(tool.__doc__ or ""))
    return server


def mount_mcp(app: FastAPI, server: MCPServer) -> contextlib.AbstractAsyncContextManager[None]:
    """Serve ``server`` at ``/mcp`` on ``app``; return the context the app's lifespan must enter.

    The endpoint is a plain route, not a mount, so ``POST /mcp`` is answered directly (a mount
    would redirect it to ``/mcp/``). Each entry of the returned context starts a fresh session
    manager (the SDK's can run only once), so an app whose lifespan runs twice, as in tests,
    keeps working. Outside it, ``/mcp`` answers 503.
    """
    security = getattr(server, "transport_security", None) or transport_security_for(Settings())
    endpoint = _MCPEndpoint(server, security)
    # Starlette serves an endpoint that is not a function as a raw ASGI app.
    app.router.add_route(
        MCP_PATH,
        endpoint,  # type: ignore[arg-type]
        methods=["GET", "POST", "DELETE"],
        include_in_schema=False,
    )
    return endpoint


class _MCPEndpoint(contextlib.AbstractAsyncContextManager[None]):
    """ASGI endpoint of ``/mcp``, and the context that runs its session manager.

    Entering starts a new session manager, since the SDK's can run only once; requests are
    handed to it until the context exits.
    """

    def __init__(self, server: MCPServer, security: TransportSecuritySettings) -> None:
        self._server = server
        self._security = security
        self._manager: StreamableHTTPSessionManager | None = None
        self._stack: contextlib.AsyncExitStack | None = None

    async def __aenter__(self) -> None:
        if self._stack is not None:
            raise RuntimeError("the MCP session manager is already running")
        # streamable_http_app() is the SDK's public way to get a new session manager; its
        # Starlette app is not used, this endpoint calls the manager directly.
        self._server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            transport_security=self._security,
            max_request_body_size=MAX_MCP_BODY_BYTES,
        )
        manager = self._server.session_manager
        stack = contextlib.AsyncExitStack()
        await stack.enter_async_context(manager.run())
        self._stack, self._manager = stack, manager

    async def __aexit__(self, *exc_info: object) -> None:
        stack, self._stack, self._manager = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        manager = self._manager
        if manager is None:
            response = JSONResponse({"detail": "the MCP service is not running"}, status_code=503)
            await response(scope, receive, send)
            return
        await manager.handle_request(scope, receive, send)


class KernelTools:
    """The tools. Their docstrings and argument descriptions are what an agent reads."""

    def __init__(
        self,
        get_manager: Callable[[], JobManager],
        settings: Settings,
        heartbeat_s: float = HEARTBEAT_S,
        admission: Admission | None = None,
    ) -> None:
        self._get_manager = get_manager
        self._settings = settings
        self._heartbeat_s = heartbeat_s
        self._admission = admission or Admission(settings.max_queued_jobs)

    async def evaluate_kernel(
        self,
        kernel_source: KernelSource,
        kernel_type: KernelTypeArg,
        io: IOArg = None,
        metadata: MetadataArg = None,
        num_trials: NumTrials = 100,
        timeout: TimeoutArg = 120,
        *,
        ctx: Context,
    ) -> Annotated[CallToolResult, EvaluationResponse]:
        """Compile, run and time ONE kernel; use it to measure a kernel's speed.

        Returns kernel_exec_result: compiled, outcome (success / compile_error / runtime_error /
        timeout) with the full error text, and runtime_stats in milliseconds (mean, median, std,
        min, max, p95, p99). Correctness is NOT checked; use compare_kernels for that.

        Which IOContract (`io`) each kernel_type needs:
        - torch: none if the source defines get_inputs() (KernelBench format), else `io`.
        - triton / cuda: required, listing every argument in call order plus `launch`
          (triton: grid, num_warps; cuda: grid and block; cuda also needs metadata.kernel_name).
        Tiny example for `y = x * 2` in torch:
          kernel_source = "import torch\\nclass Model(torch.nn.Module):\\n    def forward(self, x):\\n        return x * 2"
          io = {"args": [{"name": "x", "type": "tensor", "role": "input",
                "tensor_spec": {"shape": [1024], "dtype": "float32", "init": {"kind": "randn", "seed": 1}}}]}
        Output buffers are tensors with role "output" and no init; scalars are
        {"name": "n", "type": "int", "value": 1024}; Triton constexprs add "is_meta": true.
        """
        kernel = _kernel(kernel_source, kernel_type, io, metadata)
        request = _build(EvaluationRequest, kernel=kernel, num_trials=num_trials, timeout=timeout)
        return await self._run(
            ctx, timeout, lambda on_progress: self._manager().evaluate(request, on_progress)
        )

    async def compare_kernels(
        self,
        ref_source: KernelSource,
        ref_type: KernelTypeArg,
        custom_source: KernelSource,
        custom_type: KernelTypeArg,
        ref_io: IOArg = None,
        custom_io: IOArg = None,
        ref_metadata: MetadataArg = None,
        custom_metadata: MetadataArg = None,
        num_trials: NumTrials = 100,
        num_correct_trials: NumCorrectTrials = 5,
        atol: Tolerance = None,
        rtol: Tolerance = None,
        timeout: TimeoutArg = 120,
        *,
        ctx: Context,
    ) -> Annotated[CallToolResult, CompareResponse]:
        """Check a custom kernel against a reference on identical inputs, then time both.

        Use it to tell whether an optimised kernel is correct and faster. The reference
        (`ref_*`, usually plain PyTorch) and the custom kernel (`custom_*`) each take the same
        kind of arguments as evaluate_kernel: source, kernel type, optional IOContract (required
        for triton and cuda) and metadata. The custom kernel's outputs (its return value, or
        its IOContract args with role "output"/"inout") are compared with the reference's
        return value within atol/rtol, `num_correct_trials` times on fresh inputs.

        Result: kernel_exec_result is the custom kernel's verdict (outcome "incorrect" with
        validation_error naming the max difference when outputs differ), ref_exec_result and
        ref_runtime the reference's. Speedup = ref_runtime.mean / kernel_exec_result.runtime.
        Timing is skipped for a custom kernel that is not correct.
        """
        ref = _kernel(ref_source, ref_type, ref_io, ref_metadata)
        custom = _kernel(custom_source, custom_type, custom_io, custom_metadata)
        request = _build(
            CompareRequest,
            ref_kernel=ref,
            custom_kernel=custom,
            num_trials=num_trials,
            num_correct_trials=num_correct_trials,
            atol=atol,
            rtol=rtol,
            timeout=timeout,
        )
        return await self._run(
            ctx,
            timeout,
            lambda on_progress: self._manager().compare(request, on_progress),
            kind="compare",
        )

    async def validate_kernel(
        self,
        kernel_source: KernelSource,
        kernel_type: KernelTypeArg,
        io: IOArg = None,
        metadata: MetadataArg = None,
        timeout: TimeoutArg = 120,
        *,
        ctx: Context,
    ) -> Annotated[CallToolResult, EvaluationResponse]:
        """Quick check: does the kernel compile and run once with its inputs? No timing.

        Use it while writing a kernel, before spending time on evaluate_kernel or
        compare_kernels. Arguments as for evaluate_kernel (triton and cuda need `io`). The
        result's kernel_exec_result.outcome is success, compile_error (with
        compilation_error) or runtime_error (with runtime_error).
        """
        kernel = _kernel(kernel_source, kernel_type, io, metadata)
        return await self._run(
            ctx,
            timeout,
            lambda on_progress: self._manager().validate(
                kernel, timeout=timeout, on_progress=on_progress
            ),
            kind="validate",
        )

    async def get_server_stats(self) -> ServerStatus:
        """Server health and load: GPUs (or CPU mode), supported kernel types, whether device
        metrics are on, and job counters (completed, failed, queued, running, uptime).

        Use it to see whether the server can run your kernel type before submitting one.
        """
        try:
            manager = self._manager()
            return ServerStatus(health=manager.health(), stats=manager.stats())
        except Exception as exc:
            logger.exception("get_server_stats failed")
            raise ToolError(f"server error: {type(exc).__name__}: {exc}") from exc

    async def get_job_status(
        self, job_id: Annotated[str, Field(min_length=1, max_length=128)]
    ) -> Annotated[CallToolResult, JobStatusResponse]:
        """State of a job by the job_id a tool returned: queued, running, completed, timed_out
        or failed, with its timestamps and, once finished, its full result.
        """
        try:
            status = self._manager().job_status(job_id)
        except Exception as exc:
            logger.exception("get_job_status failed")
            return _error(f"Server error while looking up job {job_id!r}: {exc}")
        if status is None:
            return _error(
                f"No job with id {job_id!r}. Job ids are returned by evaluate_kernel, "
                f"compare_kernels and validate_kernel; old jobs are removed after "
                f"{self._settings.job_retention_hours:g} hours."
            )
        return CallToolResult(
            content=[TextContent(type="text", text=_json(status))],
            structured_content=status.model_dump(mode="json"),
        )

    # ---- shared path of the three job tools ----------------------------------------------------

    def _manager(self) -> JobManager:
        return self._get_manager()

    async def _run(
        self,
        ctx: Context,
        timeout: int,
        submit: Callable[[ProgressFn], Awaitable[JobOutcome]],
        kind: Literal["evaluate", "compare", "validate"] = "evaluate",
    ) -> CallToolResult:
        full = self._admission.check(self._manager(), kind)
        if full is not None:
            return _error(
                f"The job was not queued: {full.message()}. Nothing ran; submit it again later."
            )
        relay = _ProgressRelay(ctx)
        outcome: JobOutcome | None = None
        failure: BaseException | None = None
        deadline = timeout + self._settings.worker_grace_s + QUEUE_ALLOWANCE_S

        async def run_job(scope: anyio.CancelScope) -> None:
            nonlocal outcome, failure
            try:
                outcome = await submit(relay)
            except Exception as exc:  # a server fault: reported to the agent, not raised
                logger.exception("MCP %s job failed inside the server", kind)
                failure = exc
            finally:
                scope.cancel()

        with anyio.move_on_after(deadline) as waited:
            async with anyio.create_task_group() as tg:
                tg.start_soon(run_job, tg.cancel_scope)
                tg.start_soon(relay.heartbeat, self._heartbeat_s)
        if waited.cancelled_caught:
            return _error(
                f"The server gave no verdict within {deadline:.0f} s (timeout {timeout} s plus "
                "time to queue and start a worker); the server is overloaded or stuck. "
                "Check get_server_stats and retry later."
            )
        if failure is not None:
            return _error(
                f"Server error while running the {kind} job: {type(failure).__name__}: {failure}. "
                "This is a fault of the server, not of the kernel; retry or report it."
            )
        assert outcome is not None
        return _job_result(outcome, kind, timeout)


class _ProgressRelay:
    """Forwards the JobManager's ``(message, fraction)`` reports as MCP progress notifications.

    MCP requires progress to increase with every notification, so a report that does not move
    forward (a repeated stage, a heartbeat) is nudged just past the previous value.
    """

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._last = -1.0
        self._message = "submitted"
        self._started = time.monotonic()

    async def __call__(self, message: str, fraction: float) -> None:
        self._message = message
        await self._send(message, fraction)

    async def heartbeat(self, interval_s: float) -> None:
        while True:
            await anyio.sleep(interval_s)
            elapsed = time.monotonic() - self._started
            await self._send(f"{self._message} ({elapsed:.0f} s elapsed)", self._last)

    async def _send(self, message: str, fraction: float) -> None:
        value = max(min(max(fraction, 0.0), 1.0), self._last + 1e-6)
        self._last = value
        try:
            await self._ctx.report_progress(value, 1.0, message)
        except Exception:  # a client that went away must not fail the job
            logger.debug("could not send MCP progress", exc_info=True)


# ---- results -------------------------------------------------------------------------------------


def _job_result(
    outcome: JobOutcome, kind: Literal["evaluate", "compare", "validate"], timeout: int
) -> CallToolResult:
    response: EvaluationResponse = outcome.response
    if kind != "compare":
        response = EvaluationResponse.model_validate(
            response.model_dump(include=set(EvaluationResponse.model_fields))
        )
    if outcome.http_status == 408:
        return _error(
            f"Job {response.job_id} timed out after {timeout} s and was killed"
            f"{': ' + response.error if response.error else ''}. Raise `timeout` "
            f"(at most {MAX_TIMEOUT_S}) or make the kernel faster.",
            response,
        )
    if outcome.http_status != 200:
        return _error(
            f"Job {response.job_id} failed in the server (HTTP {outcome.http_status}): "
            f"{response.error or 'no detail'}. This is not a verdict on the kernel.",
            response,
        )
    # A 200 with status "error" is still a verdict (e.g. the reference kernel failed).
    return CallToolResult(
        content=[
            TextContent(type="text", text=_summary(response)),
            TextContent(type="text", text=_json(response)),
        ],
        structured_content=response.model_dump(mode="json"),
    )


def _summary(response: EvaluationResponse) -> str:
    """One verdict line, then any error text in full: what an agent reads first."""
    result = response.kernel_exec_result
    lines = [f"Job {response.job_id}: {_verdict(result) if result else 'no result'}"]
    if isinstance(response, CompareResponse):
        ref = response.ref_exec_result
        if response.ref_runtime and result is not None and result.runtime > 0:
            speedup = response.ref_runtime.mean / result.runtime
            lines.append(
                f"Reference {response.ref_runtime.mean:.4g} ms, custom {result.runtime:.4g} ms: "
                f"speedup {speedup:.3g}x"
            )
        if ref is not None and ref.outcome is not Outcome.SUCCESS:
            lines.append(f"The REFERENCE kernel failed: {_verdict(ref)}")
            if not response.error:  # else the error below already carries its message
                lines += _errors(ref)
    if result is not None:
        lines += _errors(result)
    if response.error:
        lines.append(f"error: {response.error}")
    return "\n".join(lines)


def _verdict(result: KernelExecResult) -> str:
    text = {
        Outcome.SUCCESS: "success",
        Outcome.COMPILE_ERROR: "compile_error: the kernel did not compile or load",
        Outcome.RUNTIME_ERROR: "runtime_error: the kernel failed while running",
        Outcome.INCORRECT: "incorrect: outputs do not match the reference",
        Outcome.TIMEOUT: "timeout: the kernel ran past the job's timeout",
        Outcome.NOT_RUN: "not_run: the kernel was not run",
    }[result.outcome]
    stats = result.runtime_stats
    if stats is not None:
        text += (
            f"; runtime mean {stats.mean:.4g} ms, median {stats.median:.4g}, std {stats.std:.3g}, "
            f"n={stats.num_samples} ({stats.device}{', ' + stats.method if stats.method else ''})"
        )
    return text


def _errors(result: KernelExecResult) -> list[str]:
    return [
        f"{label}:\n{text}"
        for label, text in (
            ("compilation_error", result.compilation_error),
            ("validation_error", result.validation_error),
            ("runtime_error", result.runtime_error),
        )
        if text
    ]


def _json(model: BaseModel) -> str:
    return model.model_dump_json(indent=2, exclude_none=True)


def _error(message: str, response: EvaluationResponse | None = None) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=message)],
        structured_content=None if response is None else response.model_dump(mode="json"),
        is_error=True,
    )


# ---- requests ------------------------------------------------------------------------------------

# The tool arguments were validated already; what can still fail is a rule that spans fields.


def _kernel(
    source: str, kernel_type: KernelType, io: IOContract | None, metadata: KernelMetadata | None
) -> KernelCode:
    return _build(KernelCode, source_code=source, kernel_type=kernel_type, io=io, metadata=metadata)


def _build(model: type[_Model], **fields: object) -> _Model:
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or model.__name__}: {err['msg']}"
            for err in exc.errors()
        )
        raise ToolError(f"invalid arguments: {problems}") from exc
