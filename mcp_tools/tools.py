"""The MCP tools: the same JobManager the REST routes use, with progress notifications.

Arguments and results are the API's wire models, so every tool publishes an input and an
output schema. A kernel's failure (compile error, wrong output, runtime error) is a normal
result; a bad argument, a full queue, a job that ran past its timeout or a fault of the server
is an error result (``isError``) whose text says what to change (see :mod:`mcp_tools.results`).
Nothing waits forever: a job gets at most its timeout plus the worker grace plus the queue
allowance before the tool gives up.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

import anyio
from kernel_eval_client.io_contract import IOContract
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, Field, ValidationError

from mcp_tools.results import (
    InvalidArguments,
    as_json,
    batch_line,
    batch_result,
    error,
    job_result,
)
from mcp_tools.schemas import (
    BatchResults,
    CandidatesArg,
    IOArg,
    KernelSource,
    KernelTypeArg,
    MetadataArg,
    NumCorrectTrials,
    NumTrials,
    RobustnessArg,
    ServerStatus,
    TimeoutArg,
    Tolerance,
)
from orchestration.admission import Admission
from orchestration.batch import Batch
from orchestration.job_manager import http_status
from shared.models import (
    CompareBatchRequest,
    CompareBatchResult,
    CompareBatchSummary,
    CompareRequest,
    CompareResponse,
    EvaluationRequest,
    EvaluationResponse,
    JobKind,
    JobStatusResponse,
    KernelCode,
    KernelMetadata,
    KernelType,
)
from shared.settings import Settings

if TYPE_CHECKING:
    from orchestration.job_manager import JobManager, JobOutcome

logger = logging.getLogger(__name__)

# Time a job may spend waiting for a free device before the tool stops waiting for it.
QUEUE_ALLOWANCE_S = 300.0
# Progress is re-sent this often while a job runs, so clients and proxies see it is alive.
HEARTBEAT_S = 10.0

ProgressFn = Callable[[str, float], Awaitable[None]]
_Model = TypeVar("_Model", bound=BaseModel)


class KernelTools:
    """The tools. Their docstrings and argument descriptions are what an agent reads."""

    def __init__(
        self,
        get_manager: Callable[[], JobManager],
        settings: Settings,
        heartbeat_s: float = HEARTBEAT_S,
        admission: Admission | None = None,
        queue_allowance_s: float = QUEUE_ALLOWANCE_S,
    ) -> None:
        self._get_manager = get_manager
        self._settings = settings
        self._heartbeat_s = heartbeat_s
        self._admission = admission or Admission(settings.max_queued_jobs)
        self._queue_allowance_s = queue_allowance_s

    def all(self) -> list[Callable[..., Awaitable[object]]]:
        """Every tool, in the order they are listed."""
        return [
            self.evaluate_kernel,
            self.compare_kernels,
            self.compare_batch,
            self.validate_kernel,
            self.get_server_stats,
            self.get_job_status,
        ]

    async def evaluate_kernel(
        self,
        kernel_source: KernelSource,
        kernel_type: KernelTypeArg,
        io: IOArg = None,
        metadata: MetadataArg = None,
        num_trials: NumTrials = None,
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
        num_trials: NumTrials = None,
        num_correct_trials: NumCorrectTrials = 5,
        atol: Tolerance = None,
        rtol: Tolerance = None,
        timeout: TimeoutArg = 120,
        robustness: RobustnessArg = False,
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
        ref_runtime the reference's; kernel_exec_result.metadata.speedup is the reference's
        median over the custom kernel's. metadata also says which kernels ran (provenance),
        how close they came to the GPU's limits (speed_of_light) and, with `robustness`, the
        cases. Timing is skipped for a custom kernel that is not correct.
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
            robustness=robustness,
        )
        return await self._run(
            ctx,
            timeout,
            lambda on_progress: self._manager().compare(request, on_progress),
            kind="compare",
        )

    async def compare_batch(
        self,
        ref_source: KernelSource,
        ref_type: KernelTypeArg,
        custom_kernels: CandidatesArg,
        ref_io: IOArg = None,
        ref_metadata: MetadataArg = None,
        num_trials: NumTrials = None,
        num_correct_trials: NumCorrectTrials = 5,
        atol: Tolerance = None,
        rtol: Tolerance = None,
        timeout: TimeoutArg = 120,
        *,
        ctx: Context,
    ) -> Annotated[CallToolResult, BatchResults]:
        """Compare MANY candidate kernels against one reference in one call.

        Use it to pick the best of several attempts. Each entry of `custom_kernels` is
        {"source_code", "kernel_type", "io", "metadata"}, with the meaning of compare_kernels'
        custom_source, custom_type, custom_io and custom_metadata. Every candidate gets its own
        job (and job_id), checked and timed as compare_kernels would with the parameters given
        here; they run in parallel on the server's devices and the reference is run once and
        reused. Progress notifications report each candidate as it finishes.

        Result: `results`, one per candidate in order (index, job_id, state and `response`,
        which is what compare_kernels would return), and `summary`, the count of candidates
        by verdict (success, incorrect, compile_error, runtime_error, timeout, not_run, failed).
        A candidate that fails is reported in its result; the call is an error only when the
        batch was not run (bad arguments, a full queue) or the server stopped answering.
        """
        ref = _kernel(ref_source, ref_type, ref_io, ref_metadata)
        request = _build(
            CompareBatchRequest,
            ref_kernel=ref,
            custom_kernels=custom_kernels,
            num_trials=num_trials,
            num_correct_trials=num_correct_trials,
            atol=atol,
            rtol=rtol,
            timeout=timeout,
        )
        manager = self._manager()
        count = len(request.custom_kernels)
        full = self._admission.check(manager, "compare", count)
        if full is not None:
            return error(
                f"The batch was not queued: {full.message()}. Nothing ran; submit it again later."
            )
        try:
            batch = Batch.start(manager, request)
        except Exception as exc:  # a server fault: reported to the agent, not raised
            logger.exception("MCP compare_batch could not queue its jobs")
            return error(f"Server error while queueing the batch: {type(exc).__name__}: {exc}.")
        relay = _ProgressRelay(ctx)
        await relay("queued", 0.0)
        outcomes: dict[int, JobOutcome] = {}
        results: list[CompareBatchResult] = []
        # Enough for every job to run one after the other: the tool never waits forever.
        deadline = self._queue_allowance_s + count * (timeout + self._settings.worker_grace_s)

        async def collect(scope: anyio.CancelScope) -> None:
            async for finished in batch.as_finished():
                outcome = finished.outcome
                outcomes[finished.index] = outcome
                result = CompareBatchResult(
                    index=finished.index, job_id=finished.job_id, state=outcome.state,
                    status_code=http_status(outcome.state), response=outcome.response,
                )
                results.append(result)
                await relay(batch_line(result, len(results), count), len(results) / count)
            scope.cancel()

        with anyio.move_on_after(deadline) as waited:
            async with anyio.create_task_group() as tg:
                tg.start_soon(collect, tg.cancel_scope)
                tg.start_soon(relay.heartbeat, self._heartbeat_s)
        results.sort(key=lambda r: r.index)
        summary = CompareBatchSummary.of(results)
        unfinished = [job_id for i, job_id in enumerate(batch.job_ids) if i not in outcomes]
        answered = BatchResults(count=summary.count, summary=summary.summary, results=results,
                                unfinished_job_ids=unfinished)
        problem = None
        if waited.cancelled_caught:
            problem = (
                f"The server gave no verdict for {len(unfinished)} of {count} candidates within "
                f"{deadline:.0f} s; they may still run: look them up with get_job_status."
            )
        return batch_result(answered, outcomes, timeout, problem)

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
            return error(f"Server error while looking up job {job_id!r}: {exc}")
        if status is None:
            return error(
                f"No job with id {job_id!r}. Job ids are returned by evaluate_kernel, "
                f"compare_kernels, compare_batch and validate_kernel; old jobs are removed "
                f"after {self._settings.job_retention_hours:g} hours."
            )
        return CallToolResult(
            content=[TextContent(type="text", text=as_json(status))],
            structured_content=status.model_dump(mode="json"),
        )

    # ---- shared path of the single-job tools ---------------------------------------------------

    def _manager(self) -> JobManager:
        return self._get_manager()

    async def _run(
        self,
        ctx: Context,
        timeout: int,
        submit: Callable[[ProgressFn], Awaitable[JobOutcome]],
        kind: JobKind = "evaluate",
    ) -> CallToolResult:
        full = self._admission.check(self._manager(), kind)
        if full is not None:
            return error(
                f"The job was not queued: {full.message()}. Nothing ran; submit it again later."
            )
        relay = _ProgressRelay(ctx)
        outcome: JobOutcome | None = None
        failure: BaseException | None = None
        deadline = timeout + self._settings.worker_grace_s + self._queue_allowance_s

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
            return error(
                f"The server gave no verdict within {deadline:.0f} s (timeout {timeout} s plus "
                "time to queue and start a worker); the server is overloaded or stuck. "
                "Check get_server_stats and retry later."
            )
        if failure is not None:
            return error(
                f"Server error while running the {kind} job: {type(failure).__name__}: {failure}. "
                "This is a fault of the server, not of the kernel; retry or report it."
            )
        assert outcome is not None
        return job_result(outcome, kind, timeout)


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
        raise InvalidArguments(exc) from exc
