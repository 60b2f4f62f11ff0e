"""Each request says what job it is (orchestration/job_requests.py): every parameter a request
gives reaches its WorkerJob, and the server's default fills what it leaves out."""

from __future__ import annotations

from orchestration import job_requests
from orchestration.job_requests import Assigned
from shared.models import CompareBatchRequest, CompareRequest, EvaluationRequest, KernelCode

REF = KernelCode(source_code="class Model: pass", kernel_type="torch")
CUSTOM = KernelCode(source_code="class ModelNew: pass", kernel_type="torch")


def assigned(device_metrics: bool = False) -> Assigned:
    return Assigned(job_id="j", device="cuda", work_dir="/jobs/j", cache_dir="/cache",
                    device_metrics=device_metrics)


def test_an_evaluation_carries_its_timing_and_profiling_parameters() -> None:
    request = EvaluationRequest(kernel=CUSTOM, num_trials=40, enable_device_metrics=True,
                                device_metrics_preset="full", lock_clocks=True)
    job = job_requests.evaluation(request, assigned(device_metrics=False))
    assert (job.job_id, job.kind, job.kernel, job.ref_kernel) == ("j", "evaluate", CUSTOM, None)
    assert (job.num_trials, job.num_correct_trials) == (40, 1)
    assert job.enable_device_metrics and job.device_metrics_preset == "full" and job.lock_clocks
    assert (job.device, job.work_dir, job.cache_dir) == ("cuda", "/jobs/j", "/cache")


def test_a_request_that_does_not_say_gets_the_servers_device_metrics_default() -> None:
    unsaid = EvaluationRequest(kernel=CUSTOM)
    assert job_requests.evaluation(unsaid, assigned(device_metrics=True)).enable_device_metrics
    assert not job_requests.evaluation(unsaid, assigned()).enable_device_metrics
    refused = EvaluationRequest(kernel=CUSTOM, enable_device_metrics=False)
    assert not job_requests.evaluation(refused, assigned(device_metrics=True)) \
        .enable_device_metrics


def test_a_comparison_carries_its_checks_and_its_batch() -> None:
    request = CompareRequest(ref_kernel=REF, custom_kernel=CUSTOM, num_trials=7,
                             num_correct_trials=3, atol=1e-3, rtol=2e-3, reuse_reference=False,
                             lock_clocks=True)
    job = job_requests.comparison(request, assigned(), batch_id="b")
    assert (job.kind, job.kernel, job.ref_kernel) == ("compare", CUSTOM, REF)
    assert (job.num_trials, job.num_correct_trials, job.atol, job.rtol) == (7, 3, 1e-3, 2e-3)
    assert job.reuse_reference is False and job.lock_clocks and job.batch_id == "b"


def test_each_candidate_of_a_batch_is_a_comparison_with_the_batchs_parameters() -> None:
    batch = CompareBatchRequest(ref_kernel=REF, custom_kernels=[CUSTOM, REF], atol=0.5)
    jobs = [job_requests.comparison(r, assigned(), "b") for r in batch.requests()]
    assert [j.kernel for j in jobs] == [CUSTOM, REF] and {j.atol for j in jobs} == {0.5}


def test_a_validation_runs_once_with_the_defaults() -> None:
    job = job_requests.validation(CUSTOM, assigned(device_metrics=True))
    assert (job.kind, job.kernel, job.num_trials, job.num_correct_trials) == (
        "validate", CUSTOM, 1, 1)
    assert job.enable_device_metrics and job.device_metrics_preset == "basic"
    assert not job.lock_clocks and job.ref_kernel is None
