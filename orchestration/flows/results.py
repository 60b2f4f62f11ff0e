"""Assembling a kernel's result from what its flow established."""

from __future__ import annotations

from typing import Any

from orchestration.placement import Observed, Seat
from orchestration.worker import Worker
from profiling.integrity import TimingVerdict
from shared.models import KernelExecResult, Outcome, WorkerJob
from shared.protocol import REHEARSE_ALL, REHEARSE_ALONE, Resources

CPU_TIMING_NOTE = "CPU mode: timings are CPU wall-clock times, not GPU times"


def metadata(job: WorkerJob, seat: Seat, artifacts: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"device": seat.device, "gpu_id": job.gpu_id}
    if seat.device == "cuda":
        meta["gpu_type"] = seat.gpu_type
    else:
        meta["gpu_type"] = None
        meta["timing_note"] = CPU_TIMING_NOTE
    meta["device_metrics"] = None
    if artifacts:
        meta["artifacts"] = dict(artifacts)
    return meta


def success(job: WorkerJob, seat: Seat, artifacts: dict[str, str] | None = None,
            correctness: bool | None = None) -> KernelExecResult:
    return KernelExecResult(outcome=Outcome.SUCCESS, compiled=True, correctness=correctness,
                            metadata=metadata(job, seat, artifacts))


def with_timing(result: KernelExecResult, verdict: TimingVerdict,
                observed: Observed | None) -> KernelExecResult:
    result.runtime_stats, result.runtime = verdict.stats, verdict.stats.mean
    result.integrity = verdict.report
    result.metadata["timing_figures"] = verdict.figures
    if observed is not None and observed.gpu_state is not None:
        result.metadata["gpu_state"] = observed.gpu_state
    return result


def process_setup(result: KernelExecResult, worker: Worker) -> None:
    """How its process was made: the hardware work queues of its CUDA context
    (CUDA_DEVICE_MAX_CONNECTIONS: 1 unless its source may use several streams), what it
    warmed beside the context (cuBLAS only where its source may call it) and which of the
    harness's paths it rehearsed (a kernel alone, or a comparison's too, which a GPU worker
    never plays in one process); see orchestration.worker_pool."""
    if worker.queues is not None:
        result.metadata["work_queues"] = int(worker.queues)
    if worker.warmed is not None:
        result.metadata["worker_warmed"] = worker.warmed.libs
        result.metadata["worker_rehearsed"] = (REHEARSE_ALONE if worker.warmed.alone
                                               else REHEARSE_ALL)


def resources(used: Resources, input_bytes: int, output_bytes: int) -> dict[str, Any]:
    out = used.model_dump()
    out["input_bytes"] = int(input_bytes)
    out["output_bytes"] = int(output_bytes)
    return out
