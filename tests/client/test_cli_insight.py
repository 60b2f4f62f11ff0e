"""``kernel-eval compare`` prints what a result says beside its verdict: each side's speed of
light, the kernels its traced call ran and the robustness cases."""

from __future__ import annotations

from kernel_eval_client.cli_format import format_comparison
from kernel_eval_client.models import CompareResponse


def response(metadata: dict, ref_metadata: dict | None = None) -> CompareResponse:
    stats = {"mean": 1.0, "median": 1.0, "std": 0.0, "min": 1.0, "max": 1.0,
             "percentile_95": 1.0, "percentile_99": 1.0, "num_samples": 20}
    return CompareResponse.model_validate({
        "job_id": "j", "status": "success",
        "kernel_exec_result": {"outcome": "success", "compiled": True, "correctness": True,
                               "runtime": 1.0, "runtime_stats": stats, "metadata": metadata},
        "ref_exec_result": {"outcome": "success", "compiled": True, "correctness": True,
                            "runtime": 2.0, "runtime_stats": stats,
                            "metadata": ref_metadata or {}}})


PROVENANCE = {"observed": True, "own_share": 0.25, "no_own_kernel_ran": False, "kernels": [
    {"name": "add_kernel", "origin": "own", "count": 1, "device_ms": 0.25},
    {"name": "sm90_xmma_gemm_f32f32_tf32f32", "origin": "library", "count": 2,
     "device_ms": 0.75}]}


def test_the_speed_of_light_of_each_side_is_printed() -> None:
    light = {"speed_of_light": "estimated", "bound_ms": 0.5, "memory_fraction": 0.125,
             "compute_fraction": 0.5, "score": 0.75}
    text = format_comparison(response({"speedup": 2.0, "speed_of_light": light},
                                      {"speed_of_light": {**light, "score": 0.5}}))
    assert "speed of light" in text
    custom_row = next(line for line in text.splitlines() if line.startswith("custom (estimated)"))
    assert custom_row.split()[2:] == ["0.5", "12.5%", "50.0%", "0.75"]


def test_the_kernels_a_call_ran_are_listed_by_device_time_with_the_own_share() -> None:
    text = format_comparison(response({"provenance": PROVENANCE}))
    lines = text.splitlines()
    first = lines.index(next(line for line in lines if line.startswith("custom kernels")))
    assert lines[first + 1].startswith("sm90_xmma_gemm") and "library" in lines[first + 1]
    assert lines[first + 2].startswith("add_kernel") and "own" in lines[first + 2]
    assert "own kernels' share of device time: 25.0%" in text


def test_an_answer_whose_own_kernels_never_ran_says_so() -> None:
    block = {**PROVENANCE, "own_share": 0.0, "no_own_kernel_ran": True,
             "reason": "ran no kernel of the kernels its source defines (add_kernel)"}
    assert "note: ran no kernel of the kernels its source defines" in format_comparison(
        response({"provenance": block}))


def test_robustness_cases_are_counted_and_the_failed_named() -> None:
    cases = {"cases": [{"name": "scale_1e3", "kind": "scale", "status": "failed"},
                       {"name": "zeros", "kind": "distribution", "status": "passed"}],
             "passed": 1, "failed": 1, "skipped": 0, "all_passed": False}
    text = format_comparison(response({"robustness": cases}))
    assert "custom robustness: 1 passed, 1 failed (scale_1e3), 0 skipped" in text


def test_a_result_without_them_prints_none_of_it() -> None:
    text = format_comparison(response({"speedup": 2.0}))
    assert "speed of light" not in text and "kernels" not in text and "robustness" not in text


def test_fast_p_over_runs_whose_own_kernels_ran_counts_a_library_only_answer_as_a_failure(
        ) -> None:
    from kernel_eval_client.models import KernelType
    from kernel_eval_client.suite import RunResult, Verdict, fast_p

    def run(own: bool | None) -> RunResult:
        return RunResult(problem="p", solution=str(own), kernel_type=KernelType.TRITON,
                         verdict=Verdict.CORRECT, speedup=2.0, own_kernels_ran=own)

    runs = [run(True), run(False), run(None)]
    assert fast_p(runs)["fast_1"] == 1.0
    # unseen (None: CPU mode, no trace) is not held against a run
    assert fast_p(runs, own_only=True)["fast_1"] == 2 / 3
