"""The job manager: accepts jobs, runs each in a worker on a device slot, records everything.

A job's path: stored as ``queued`` → waits for a free slot → ``running`` in a worker → the
worker's result file becomes the response (``completed``), or the timeout kills the worker
(``timed_out``, HTTP 408), or the server could not finish it (``failed``, HTTP 500). A kernel
that crashes its worker still gets a verdict: a runtime error naming the signal and the stage
it died in.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import signal
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from compilation.registry import available_kernel_types
from orchestration.device_probe import DeviceInfo
from orchestration.gpu_pool import DevicePool, Slot
from orchestration.job_store import JobStore
from orchestration.worker_pool import WorkerPool
from shared.models import (
    CleanupResponse,
    CompareRequest,
    CompareResponse,
    EvaluationRequest,
    HealthResponse,
    JobKind,
    JobState,
    JobStatusResponse,
    KernelCode,
    KernelExecResult,
    KernelType,
    Outcome,
    StatsResponse,
    WorkerJob,
    WorkerResult,
)
from shared.job_files import job_paths, read_stage
from shared.settings import Settings

log = logging.getLogger("kernel_eval.jobs")

ProgressFn = Callable[[str, float], Awaitable[None]]

STAGE_PROGRESS = {"compile": 0.2, "validate": 0.4, "profile": 0.7, "done": 0.95}
POLL_S = 0.05
GPU_ONLY_TYPES = {KernelType.CUDA, KernelType.TORCH_CUDA}


@dataclass(frozen=True)
class JobOutcome:
    http_status: int  # 200, 408 on timeout, 500 when the server could not finish the job
    response: CompareResponse  # for /evaluate only the EvaluationResponse fields are set


class JobManager:
    def __init__(self, settings: Settings, device: DeviceInfo, store: JobStore) -> None:
        self.settings = settings
        self.device = device
        self.store = store
        if device.device == "cuda":
            slots = [Slot(i, g.id) for i, g in enumerate(device.gpus[: settings.max_workers])]
        else:
            slots = [Slot(i, None) for i in range(settings.max_workers)]
        self.pool = DevicePool(slots)
        self.workers = WorkerPool(settings, device.device)
        self.started = time.time()
        self._tasks: set[asyncio.Task[JobOutcome]] = set()

    async def start(self) -> None:
        self.settings.job_dir.mkdir(parents=True, exist_ok=True)
        lost = self.store.fail_unfinished("the server stopped while this job was in flight")
        if lost:
            log.warning("marked %d unfinished job(s) from a previous run as failed", lost)
        for slot in self.pool.slots:
            await self.workers.replenish(slot)

    async def close(self) -> None:
        await self.workers.close()

    # ---- the public API used by app.py and mcp_server.py

    async def evaluate(
        self, request: EvaluationRequest, on_progress: ProgressFn | None = None
    ) -> JobOutcome:
        return await self.start_evaluate(request, on_progress)[1]

    async def compare(
        self, request: CompareRequest, on_progress: ProgressFn | None = None
    ) -> JobOutcome:
        return await self.start_compare(request, on_progress)[1]

    async def validate(
        self, kernel: KernelCode, timeout: int = 120, on_progress: ProgressFn | None = None
    ) -> JobOutcome:
        """Compile and run once, no timing."""
        request_json = json.dumps({"kernel": kernel.model_dump(mode="json"), "timeout": timeout})
        _, outcome = self._start("validate", request_json, kernel, None, timeout, on_progress=on_progress)
        return await outcome

    def start_evaluate(
        self, request: EvaluationRequest, on_progress: ProgressFn | None = None
    ) -> tuple[str, Awaitable[JobOutcome]]:
        """Queue an evaluation; return its job id and an awaitable of its outcome."""
        return self._start(
            "evaluate", request.model_dump_json(), request.kernel, None, request.timeout,
            num_trials=request.num_trials, metrics=request.enable_device_metrics,
            on_progress=on_progress,
        )

    def start_compare(
        self, request: CompareRequest, on_progress: ProgressFn | None = None
    ) -> tuple[str, Awaitable[JobOutcome]]:
        """Queue a comparison; return its job id and an awaitable of its outcome."""
        return self._start(
            "compare", request.model_dump_json(), request.custom_kernel, request.ref_kernel,
            request.timeout, num_trials=request.num_trials,
            num_correct_trials=request.num_correct_trials, atol=request.atol, rtol=request.rtol,
            metrics=request.enable_device_metrics, on_progress=on_progress,
        )

    def job_status(self, job_id: str) -> JobStatusResponse | None:
        return self.store.get(job_id)

    def health(self) -> HealthResponse:
        types = available_kernel_types()
        if self.device.device == "cpu":
            types = [t for t in types if t not in GPU_ONLY_TYPES]
        return HealthResponse(
            status="healthy" if not self.device.errors else "degraded",
            gpu_available=self.device.device == "cuda",
            gpu_count=len(self.device.gpus),
            device=self.device.device,  # type: ignore[arg-type]
            gpus=self.device.gpus,
            kernel_types=types,
            device_metrics_enabled=self.settings.enable_device_metrics,
            version=_version(),
        )

    def stats(self) -> StatsResponse:
        counts = self.store.counts(since=self.started)
        return StatsResponse(
            jobs_completed=counts.completed,
            jobs_failed=counts.failed,
            jobs_timed_out=counts.timed_out,
            jobs_queued=counts.queued,
            jobs_running=counts.running,
            avg_runtime_ms=counts.avg_run_s * 1e3,
            gpu_utilization_pct=round(self.pool.utilization_pct(), 2),
            uptime_seconds=round(time.time() - self.started, 3),
            device=self.device.device,  # type: ignore[arg-type]
            gpu_count=len(self.device.gpus),
            worker_slots=len(self.pool.slots),
        )

    def cleanup(self, older_than_hours: float | None = None) -> CleanupResponse:
        hours = self.settings.job_retention_hours if older_than_hours is None else older_than_hours
        cutoff = time.time() - hours * 3600
        removed = self.store.remove_finished_before(cutoff)
        files = 0
        for job_id in removed:
            files += _remove_tree(self.settings.job_dir / job_id)
        # Directories of jobs the store no longer knows (e.g. a deleted database).
        if self.settings.job_dir.exists():
            for entry in self.settings.job_dir.iterdir():
                if entry.is_dir() and entry.stat().st_mtime < cutoff and self.store.get(entry.name) is None:
                    files += _remove_tree(entry)
        return CleanupResponse(removed_jobs=len(removed), removed_files=files)

    # ---- running a job

    def _start(
        self, kind: JobKind, request_json: str, kernel: KernelCode, ref: KernelCode | None,
        timeout: int, *, num_trials: int = 1, num_correct_trials: int = 1,
        atol: float | None = None, rtol: float | None = None, metrics: bool | None = None,
        on_progress: ProgressFn | None = None,
    ) -> tuple[str, Awaitable[JobOutcome]]:
        job_id = str(uuid.uuid4())
        work_dir = self.settings.job_dir / job_id
        job = WorkerJob(
            job_id=job_id, kind=kind, kernel=kernel, ref_kernel=ref, num_trials=num_trials,
            num_correct_trials=num_correct_trials, atol=atol, rtol=rtol,
            device=self.device.device,  # type: ignore[arg-type]
            enable_device_metrics=self.settings.enable_device_metrics if metrics is None else metrics,
            work_dir=str(work_dir), cache_dir=str(self.settings.build_cache_dir),
        )
        self.store.add(job_id, "compare" if kind == "compare" else "evaluate", request_json)
        # The job runs in a task of its own, so a client that disconnects does not cancel it
        # half-way (its worker would be left behind); the store keeps the outcome either way.
        task = asyncio.create_task(self._run(job, timeout, on_progress))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job_id, asyncio.shield(task)

    async def _run(self, job: WorkerJob, timeout: int, on_progress: ProgressFn | None) -> JobOutcome:
        progress = _Progress(on_progress)
        await progress("queued", 0.0)
        slot = await self.pool.acquire()
        try:
            job.gpu_id = slot.gpu_id
            self.store.mark_running(job.job_id, slot.gpu_id)
            work_dir = Path(job.work_dir)
            work_dir.mkdir(parents=True, exist_ok=True)
            request_path, result_path, stage_path = job_paths(work_dir, job.job_id)
            request_path.write_text(job.model_dump_json())
            await progress("running", 0.05)
            outcome = await self._run_worker(job, slot, timeout, request_path, stage_path, progress)
        except Exception as exc:
            log.exception("job %s failed in the server", job.job_id)
            outcome = self._finish(job, JobState.FAILED, 500, error=f"server error: {exc}")
        finally:
            await self.workers.replenish(slot)  # if the job failed before taking the spare
            self.pool.release(slot)
        await progress("done", 1.0)
        return outcome

    async def _run_worker(
        self, job: WorkerJob, slot: Slot, timeout: int, request_path: Path, stage_path: Path,
        progress: _Progress,
    ) -> JobOutcome:
        worker = await self.workers.take(slot)
        await worker.assign(request_path, job.job_id)
        # Warm the slot's next worker now, so a job arriving right after this one finds it
        # ready. It only imports and creates a context: it launches nothing on the GPU.
        await self.workers.replenish(slot)
        exit_task = asyncio.create_task(worker.wait())
        # The timeout starts when the worker picks the job up; a worker that is still starting
        # gets worker_grace_s for that.
        pickup_deadline = time.monotonic() + self.settings.worker_grace_s
        deadline: float | None = None
        stage: dict[str, str] = {}
        while not exit_task.done():
            await asyncio.wait({exit_task}, timeout=POLL_S)
            stage = read_stage(stage_path) or stage
            if stage and deadline is None:
                deadline = time.monotonic() + timeout
            if stage:
                await progress(_stage_message(stage), STAGE_PROGRESS.get(stage["stage"], 0.5))
            now = time.monotonic()
            if (deadline is not None and now > deadline) or (deadline is None and now > pickup_deadline):
                await worker.kill()
                return self._timed_out(job, timeout, stage)
        code = exit_task.result()
        result_path = job_paths(request_path.parent, job.job_id)[1]
        if result_path.exists():
            result = WorkerResult.model_validate_json(result_path.read_text())
            if result.error and result.kernel_exec_result is None and result.ref_exec_result is None:
                return self._finish(job, JobState.FAILED, 500, error=result.error)
            return self._finish(job, JobState.COMPLETED, 200, result=result)
        return self._finish(
            job, JobState.COMPLETED, 200, result=_crash_result(job, code, read_stage(stage_path))
        )

    def _timed_out(self, job: WorkerJob, timeout: int, stage: dict[str, str]) -> JobOutcome:
        message = f"Evaluation timed out after {timeout} seconds"
        if stage:
            message += f" (during {_stage_message(stage)})"
        verdict = KernelExecResult(
            outcome=Outcome.TIMEOUT, compiled=stage.get("stage") in ("validate", "profile"),
            runtime_error=message,
        )
        response = CompareResponse(
            job_id=job.job_id, status="error", error=message, kernel_exec_result=verdict
        )
        self.store.finish(job.job_id, JobState.TIMED_OUT, response, message)
        return JobOutcome(408, response)

    def _finish(
        self, job: WorkerJob, state: JobState, http_status: int, *,
        result: WorkerResult | None = None, error: str | None = None,
    ) -> JobOutcome:
        if result is not None:
            error = result.error
            response = CompareResponse(
                job_id=job.job_id,
                status="error" if result.error else "success",
                kernel_exec_result=result.kernel_exec_result,
                error=result.error,
            )
            if job.kind == "compare":
                response.ref_exec_result = result.ref_exec_result
                if result.ref_exec_result is not None:
                    response.ref_runtime = result.ref_exec_result.runtime_stats
                if result.ref_exec_result is not None and result.ref_exec_result.outcome != Outcome.SUCCESS:
                    detail = (result.ref_exec_result.compilation_error
                              or result.ref_exec_result.runtime_error or "")
                    response.error = f"{result.error}: {detail}" if result.error else detail
                    response.kernel_exec_result = KernelExecResult(outcome=Outcome.NOT_RUN)
        else:
            response = CompareResponse(job_id=job.job_id, status="error", error=error)
        self.store.finish(job.job_id, state, response, error)
        return JobOutcome(http_status, response)


class _Progress:
    """Forwards progress to the caller, once per change, never letting it break the job."""

    def __init__(self, fn: ProgressFn | None) -> None:
        self.fn = fn
        self.last: str | None = None

    async def __call__(self, message: str, fraction: float) -> None:
        if self.fn is None or message == self.last:
            return
        self.last = message
        try:
            await self.fn(message, fraction)
        except Exception:
            log.debug("progress callback failed", exc_info=True)


def _stage_message(stage: dict[str, str]) -> str:
    role = {"ref": "reference kernel", "custom": "custom kernel"}.get(stage.get("role", ""), "kernel")
    return {
        "compile": f"compiling the {role}",
        "validate": f"running the {role}",
        "profile": f"timing the {role}",
        "done": "finished",
    }.get(stage.get("stage", ""), stage.get("stage", ""))


def _crash_result(job: WorkerJob, code: int, stage: dict[str, str] | None) -> WorkerResult:
    """The verdict for a worker that died without writing a result."""
    if code < 0:
        try:
            how = f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with code {code} without writing a result (os._exit or sys.exit in kernel code?)"
    where = _stage_message(stage) if stage else "start-up"
    message = f"the worker process {how} while {where}"
    role = (stage or {}).get("role", "")
    compiled = (stage or {}).get("stage") in ("validate", "profile")
    verdict = KernelExecResult(
        outcome=Outcome.RUNTIME_ERROR if compiled else Outcome.COMPILE_ERROR,
        compiled=compiled,
        runtime_error=message if compiled else None,
        compilation_error=None if compiled else message,
    )
    if job.kind == "compare" and role == "ref":
        return WorkerResult(ref_exec_result=verdict, error="the reference kernel crashed the worker")
    return WorkerResult(kernel_exec_result=verdict)


def _remove_tree(path: Path) -> int:
    if not path.exists():
        return 0
    count = sum(1 for p in path.rglob("*") if p.is_file())
    shutil.rmtree(path, ignore_errors=True)
    return count


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kernel-eval-server")
    except PackageNotFoundError:
        return "dev"
