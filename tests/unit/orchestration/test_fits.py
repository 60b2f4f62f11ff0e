"""A problem whose declared tensors cannot fit the host's memory is refused before it runs
(orchestration.fits), with the bytes it needs and the bytes there are."""

from __future__ import annotations

from shared.models import KernelCode, Outcome, WorkerJob


def kernel(n: int) -> KernelCode:
    return KernelCode(source_code="x", kernel_type="torch", io={"args": [
        {"name": "x", "type": "tensor", "role": "input",
         "tensor_spec": {"shape": [n], "dtype": "float32", "init": {"kind": "randn"}}},
        {"name": "out", "type": "tensor", "role": "output",
         "tensor_spec": {"shape": [n], "dtype": "float32"}}]})


def job(kind: str, n: int) -> WorkerJob:
    ref = kernel(n) if kind == "compare" else None
    return WorkerJob(job_id="j", kind=kind, kernel=kernel(n), ref_kernel=ref,  # type: ignore[arg-type]
                     cache_dir="/c")


def test_a_comparison_too_large_for_the_hosts_memory_is_refused_naming_the_bytes() -> None:
    from orchestration.fits import too_big_for_the_host

    result = too_big_for_the_host(job("compare", 1 << 30), "cpu", available=4 << 30)
    assert result is not None and result.kernel_exec_result is not None
    verdict = result.kernel_exec_result
    assert verdict.outcome == Outcome.RUNTIME_ERROR and not verdict.compiled
    assert "8589934592 bytes" in (verdict.runtime_error or "")  # x and out, 4 GiB each
    assert "4294967296 bytes are available" in (verdict.runtime_error or "")


def test_a_problem_that_fits_or_declares_no_sizes_runs() -> None:
    from orchestration.fits import too_big_for_the_host

    assert too_big_for_the_host(job("compare", 1 << 20), "cpu", available=4 << 30) is None
    no_contract = WorkerJob(job_id="j", kind="evaluate", cache_dir="/c",
                            kernel=KernelCode(source_code="x", kernel_type="torch"))
    assert too_big_for_the_host(no_contract, "cpu", available=1) is None


def test_a_gpu_host_counts_fewer_host_copies_than_cpu_mode() -> None:
    from orchestration.fits import too_big_for_the_host

    borderline = job("compare", 1 << 28)  # 2 GiB of tensors
    assert too_big_for_the_host(borderline, "cpu", available=5 << 30) is not None
    assert too_big_for_the_host(borderline, "cuda", available=5 << 30) is None
