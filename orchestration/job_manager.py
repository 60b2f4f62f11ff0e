"""The job manager: the job store and the job state machine, beside an :class:`Executor`.

A job is stored ``queued``, handed to the executor, which runs it to a typed
:class:`~shared.models.WorkerResult` (the verdict, or a timeout, or a server fault), and is
stored with its final state and response. The HTTP status of a job's answer follows from its
state alone (:func:`http_status`). Nothing here spawns processes or touches a GPU: the
executor does (:class:`~orchestration.executor.LocalExecutor` by default).

Shutdown: :meth:`JobManager.close` stops intake, lets running jobs finish within
``shutdown_grace_s``, and marks whatever is left ``failed`` with the reason. Jobs still
``queued`` or ``running`` in the store when a server starts (it crashed) are marked
``failed``: a job is never re-run behind its client's back.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestration import job_requests, verdicts
from orchestration.device_probe import DeviceInfo
from orchestration.executor import Executor, LocalExecutor
from orchestration.gpu_pool import Slot
from orchestration.job_store import JobStore
from shared import job_events, languages
from shared.models import (
    CleanupResponse,
    CompareRequest,
    CompareResponse,
    EvaluationRequest,
    HealthResponse,
    JobState,
    JobStatusResponse,
    KernelCode,
    KernelType,
    LanguageInfo,
    StatsResponse,
    WorkerJob,
    WorkerResult,
)
from shared.settings import Settings

log = logging.getLogger("kernel_eval.jobs")

ProgressFn = Callable[[str, float], Awaitable[None]]
GPU_ONLY_TYPES = {KernelType.CUDA, KernelType.TORCH_CUDA}
SHUTDOWN_GRACE_S = 30.0


def http_status(state: JobState) -> int:
    """The HTTP status of a finished job's answer: the one place that decides it."""
    return {JobState.COMPLETED: 200, JobState.TIMED_OUT: 408}.get(state, 500)


@dataclass(frozen=True)
class JobOutcome:
    state: JobState
    response: CompareResponse  # for /evaluate only the EvaluationResponse fields are set

    @property
    def http_status(self) -> int:
        return http_status(self.state)


class ShuttingDown(RuntimeError):
    """The server is stopping and takes no new jobs."""


class JobManager:
    def __init__(self, settings: Settings, device: DeviceInfo, store: JobStore,
                 executor: Executor | None = None, metrics: Any = None) -> None:
        self.settings = settings
        self.device = device
        self.store = store
        self.metrics = metrics
        if executor is None:
            if device.device == "cuda":
                gpus = device.gpus[: settings.slots(len(device.gpus))]
                # GPU by GPU, then again: jobs in arrival order spread over the GPUs first
                slots = [Slot(i, g.id) for i, g in enumerate(gpus * settings.jobs_per_gpu)]
            else:
                slots = [Slot(i, None) for i in range(settings.slots(0))]
            env = {"TORCH_CUDA_ARCH_LIST": device.capability} if device.capability else {}
            if device.language_import_errors:
                env[languages.IMPORT_ERRORS_ENV] = json.dumps(device.language_import_errors)
            executor = LocalExecutor(settings, device.device, slots, device.gpus, env)
        self.executor: Executor = executor
        if metrics is not None:
            metrics.add_refresher(self._refresh_metrics)
        self.started = time.time()
        self.accepting = True
        self._tasks: set[asyncio.Task[JobOutcome]] = set()
        self._stage_sums: dict[str, float] = {}
        self._stage_counts: dict[str, int] = {}
        self._languages: list[LanguageInfo] | None = None

    async def start(self) -> None:
        self.settings.job_dir.mkdir(parents=True, exist_ok=True)
        lost = self.store.fail_unfinished("the server stopped while this job was in flight")
        if lost:
            log.warning("marked %d unfinished job(s) from a previous run as failed", lost)
        await self.executor.start()

    async def close(self, grace_s: float = SHUTDOWN_GRACE_S) -> None:
        """Stop intake, let running jobs finish within ``grace_s``, fail the rest."""
        self.accepting = False
        pending = [t for t in self._tasks if not t.done()]
        if pending:
            log.info("waiting up to %.0f s for %d job(s) to finish", grace_s, len(pending))
            _, still = await asyncio.wait(pending, timeout=grace_s)
            for task in still:
                task.cancel()
            await asyncio.gather(*still, return_exceptions=True)
        await self.executor.close()

    # ---- the public API used by app.py and the MCP tools (mcp_tools/tools.py)

    async def evaluate(self, request: EvaluationRequest,
                       on_progress: ProgressFn | None = None) -> JobOutcome:
        return await self.start_evaluate(request, on_progress)[1]

    async def compare(self, request: CompareRequest,
                      on_progress: ProgressFn | None = None) -> JobOutcome:
        return await self.start_compare(request, on_progress)[1]

    async def validate(self, kernel: KernelCode, timeout: int = 120,
                       on_progress: ProgressFn | None = None) -> JobOutcome:
        """Compile and run once, no timing."""
        return await self.start_validate(kernel, timeout, on_progress)[1]

    def start_evaluate(self, request: EvaluationRequest, on_progress: ProgressFn | None = None
                       ) -> tuple[str, Awaitable[JobOutcome]]:
        """Queue an evaluation; return its job id and an awaitable of its outcome."""
        job = job_requests.evaluation(request, self._assigned())
        return self._start(job, request.model_dump_json(), request.timeout, on_progress)

    def start_compare(self, request: CompareRequest, on_progress: ProgressFn | None = None,
                      batch_id: str | None = None) -> tuple[str, Awaitable[JobOutcome]]:
        """Queue a comparison (a candidate of batch ``batch_id``, if given); return its job id
        and an awaitable of its outcome."""
        job = job_requests.comparison(request, self._assigned(), batch_id)
        return self._start(job, request.model_dump_json(), request.timeout, on_progress)

    def start_validate(self, kernel: KernelCode, timeout: int = 120,
                       on_progress: ProgressFn | None = None) -> tuple[str, Awaitable[JobOutcome]]:
        """Queue a validation (compile and run once); return its job id and its outcome."""
        request_json = json.dumps({"kernel": kernel.model_dump(mode="json"), "timeout": timeout})
        job = job_requests.validation(kernel, self._assigned())
        return self._start(job, request_json, timeout, on_progress)

    def job_status(self, job_id: str) -> JobStatusResponse | None:
        return self.store.get(job_id)

    def queue_length(self) -> int:
        """Jobs accepted but still waiting for a device slot (what MAX_QUEUED_JOBS bounds)."""
        return self.executor.status().queue_length

    def job_log(self, job_id: str) -> str | None:
        """A job's kept worker output (``<job_dir>/<job_id>/worker.log``), None if it has none."""
        from orchestration.output_capture import read_worker_log

        return read_worker_log(self.settings.job_dir, job_id)

    def health(self) -> HealthResponse:
        types = list(KernelType)
        if self.device.device == "cpu":
            types = [t for t in types if t not in GPU_ONLY_TYPES]
        status = self.executor.status()
        cluster = status.cluster
        degraded = bool(self.device.errors) or (cluster is not None and cluster.lost > 0)
        return HealthResponse(
            status="degraded" if degraded else "healthy",
            gpu_available=self.device.device == "cuda",
            gpu_count=len(self.device.gpus),
            device=self.device.device,  # type: ignore[arg-type]
            gpus=self.device.gpus,
            kernel_types=types,
            languages=self.languages(),
            device_metrics_enabled=self.settings.enable_device_metrics,
            version=_version(),
            isolation=status.isolation,
            isolation_detail=status.isolation_detail,
            cluster=cluster,
        )

    def languages(self) -> list[LanguageInfo]:
        """The kernel languages beside torch and Triton, read once (package metadata)."""
        if self._languages is None:
            self._languages = languages.listing(self.device.device, self.device.capability,
                                                self.device.languages,
                                                self.device.language_import_errors)
        return self._languages

    def stats(self) -> StatsResponse:
        counts = self.store.counts(since=self.started)
        status = self.executor.status()
        return StatsResponse(
            jobs_completed=counts.completed,
            jobs_failed=counts.failed,
            jobs_timed_out=counts.timed_out,
            jobs_queued=counts.queued,
            jobs_running=counts.running,
            avg_runtime_ms=counts.avg_run_s * 1e3,
            gpu_utilization_pct=status.utilization_pct,
            uptime_seconds=round(time.time() - self.started, 3),
            device=self.device.device,  # type: ignore[arg-type]
            gpu_count=len(self.device.gpus),
            worker_slots=status.worker_slots,
            stage_means_ms={k: round(v / self._stage_counts[k], 3)
                            for k, v in self._stage_sums.items()},
            cache=status.cache,
            ready_workers=status.workers_ready,
            cluster=status.cluster,
        )

    def cleanup(self, older_than_hours: float | None = None) -> CleanupResponse:
        hours = self.settings.job_retention_hours if older_than_hours is None else older_than_hours
        cutoff = time.time() - hours * 3600
        removed = self.store.remove_finished_before(cutoff)
        files = 0
        for job_id in removed:
            files += _remove_tree(self.settings.job_dir / job_id)
        if self.settings.job_dir.exists():
            for entry in self.settings.job_dir.iterdir():
                if (entry.is_dir() and entry.name != "work" and entry.stat().st_mtime < cutoff
                        and self.store.get(entry.name) is None):
                    files += _remove_tree(entry)
        return CleanupResponse(removed_jobs=len(removed), removed_files=files)

    def _refresh_metrics(self) -> None:
        """Gauges read at scrape time: the worker pool's state and each GPU's busy share."""
        status = self.executor.status()
        running = sum(1 for t in self._tasks if not t.done())
        self.metrics.set_pool_state(starting=status.workers_starting,
                                    ready=status.workers_ready, busy=running)
        for label, share in status.busy_shares.items():
            self.metrics.set_gpu_busy(label, share)
        self.metrics.set_cache_counts(status.cache)

    # ---- running a job

    def _assigned(self) -> job_requests.Assigned:
        """What a new job gets from the server beside its request (a new id among them)."""
        if not self.accepting:
            raise ShuttingDown("the server is shutting down and takes no new jobs")
        job_id = str(uuid.uuid4())
        return job_requests.Assigned(
            job_id=job_id, device="cuda" if self.device.device == "cuda" else "cpu",
            work_dir=str(self.settings.job_dir / job_id),
            cache_dir=str(self.settings.build_cache_dir),
            device_metrics=self.settings.enable_device_metrics)

    def _start(self, job: WorkerJob, request_json: str, timeout: int,
               on_progress: ProgressFn | None) -> tuple[str, Awaitable[JobOutcome]]:
        job_id, kind = job.job_id, job.kind
        self.store.add(job_id, "compare" if kind == "compare" else "evaluate", request_json)
        job_dir = self.settings.job_dir / job_id
        job_dir.mkdir(parents=True, exist_ok=True)
        (job_dir / "request.json").write_text(job.model_dump_json())
        job_events.job_queued(job_id, kind, queue_length=self.queue_length())
        if self.metrics is not None:
            self.metrics.job_queued(kind)
        # The job runs in a task of its own, so a client that disconnects does not cancel it
        # half-way; the store keeps the outcome either way.
        task = asyncio.create_task(self._run(job, timeout, on_progress))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job_id, asyncio.shield(task)

    async def _run(self, job: WorkerJob, timeout: int, on_progress: ProgressFn | None) -> JobOutcome:
        progress = _Progress(on_progress)
        await progress("queued", 0.0)
        marked = False

        async def tracked(message: str, fraction: float) -> None:
            nonlocal marked
            if not marked and fraction >= 0.1:
                marked = True
                self.store.mark_running(job.job_id, job.gpu_id)
                job_events.job_started(job.job_id, job.kind, gpu=job.gpu_id)
            await progress(message, fraction)

        try:
            result = await self.executor.run(job, timeout, tracked)
        except asyncio.CancelledError:
            reason = "the server shut down before this job finished"
            result = verdicts.server_fault(reason)
            job_events.job_killed(job.job_id, job.kind, reason=reason)
            if not marked:
                self.store.mark_running(job.job_id, job.gpu_id)
            self._finish(job, result, timeout)
            raise
        except Exception as exc:
            log.exception("job %s failed in the server", job.job_id)
            result = verdicts.server_fault(f"server error: {exc}")
        if not marked:
            self.store.mark_running(job.job_id, job.gpu_id)
        outcome = self._finish(job, result, timeout)
        await progress("done", 1.0)
        return outcome

    def _finish(self, job: WorkerJob, result: WorkerResult, timeout: float = 0) -> JobOutcome:
        response = verdicts.response(job.job_id, job.kind, result)
        started = time.perf_counter()
        self.store.finish(job.job_id, result.state, response, response.error)
        response.stage_timings["handback"] = round((time.perf_counter() - started) * 1e3, 3)
        self._record(job, result, response, timeout)
        return JobOutcome(result.state, response)

    def _record(self, job: WorkerJob, result: WorkerResult, response: CompareResponse,
                timeout: float) -> None:
        verdict = response.kernel_exec_result
        outcome = verdict.outcome.value if verdict is not None else "none"
        for stage, ms in response.stage_timings.items():
            self._stage_sums[stage] = self._stage_sums.get(stage, 0.0) + ms
            self._stage_counts[stage] = self._stage_counts.get(stage, 0) + 1
        if result.state == JobState.TIMED_OUT:
            job_events.job_timed_out(job.job_id, job.kind, timeout_s=timeout, stage=result.stage)
        elif result.state == JobState.FAILED:
            job_events.job_failed(job.job_id, job.kind, error=result.error or "")
        else:
            job_events.job_finished(job.job_id, job.kind, outcome=outcome,
                                    stage_ms=response.stage_timings, gpu=job.gpu_id)
        if self.metrics is not None:
            self.metrics.job_finished(job.kind, outcome if result.state == JobState.COMPLETED
                                      else result.state.value, response.stage_timings)


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
