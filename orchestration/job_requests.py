"""What job each request is: the :class:`~shared.models.WorkerJob` of an /evaluate, a
/compare and a /validate. A /compare/batch is a /compare per candidate
(:meth:`~shared.models.CompareBatchRequest.requests`), and the legacy ``POST /`` one /compare
(:meth:`~shared.models.LegacyCompareRequest.to_compare`).

A request says what it asks for; the server adds what it does not (:class:`Assigned`): the
job's id, the device, the directories, the default for device metrics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from shared.models import CompareRequest, EvaluationRequest, KernelCode, WorkerJob


@dataclass(frozen=True)
class Assigned:
    """What the server gives a job beside its request."""

    job_id: str
    device: Literal["cuda", "cpu"]
    work_dir: str  # the server's directory for the job
    cache_dir: str  # the shared build cache
    device_metrics: bool  # ENABLE_DEVICE_METRICS: for a request that does not say

    def metrics(self, asked: bool | None) -> bool:
        return self.device_metrics if asked is None else asked


def evaluation(request: EvaluationRequest, assigned: Assigned) -> WorkerJob:
    """POST /evaluate: compile, run and time one kernel."""
    return WorkerJob(
        job_id=assigned.job_id, kind="evaluate", kernel=request.kernel,
        num_trials=request.num_trials, num_correct_trials=1, device=assigned.device,
        enable_device_metrics=assigned.metrics(request.enable_device_metrics),
        device_metrics_preset=request.device_metrics_preset, lock_clocks=request.lock_clocks,
        problem_size=request.problem_size, work_dir=assigned.work_dir,
        cache_dir=assigned.cache_dir)


def comparison(request: CompareRequest, assigned: Assigned,
               batch_id: str | None = None) -> WorkerJob:
    """POST /compare (a candidate of batch ``batch_id``, if given)."""
    return WorkerJob(
        job_id=assigned.job_id, kind="compare", kernel=request.custom_kernel,
        ref_kernel=request.ref_kernel, num_trials=request.num_trials,
        num_correct_trials=request.num_correct_trials, atol=request.atol, rtol=request.rtol,
        device=assigned.device, enable_device_metrics=assigned.metrics(
            request.enable_device_metrics),
        device_metrics_preset=request.device_metrics_preset, lock_clocks=request.lock_clocks,
        reuse_reference=request.reuse_reference, batch_id=batch_id,
        robustness=request.robustness, problem_size=request.problem_size,
        work_dir=assigned.work_dir, cache_dir=assigned.cache_dir)


def validation(kernel: KernelCode, assigned: Assigned) -> WorkerJob:
    """POST /validate: compile and run once, no timing."""
    return WorkerJob(
        job_id=assigned.job_id, kind="validate", kernel=kernel, num_trials=1,
        num_correct_trials=1, device=assigned.device,
        enable_device_metrics=assigned.metrics(None), work_dir=assigned.work_dir,
        cache_dir=assigned.cache_dir)
