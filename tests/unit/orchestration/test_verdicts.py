"""The one assembly of a job's result (orchestration/verdicts.py)."""

from __future__ import annotations

import json
import signal
from dataclasses import replace

import pytest

from mcp_tools.results import as_json
from orchestration import verdicts
from orchestration.facts import (
    Compared,
    Evaluated,
    Failed,
    Held,
    Judged,
    KernelProcess,
    ProcessSetup,
    Reference,
    Timed,
    Where,
)
from orchestration.job_step import JobStep, Side, Stage
from orchestration.ref_cache import Figure
from orchestration.worker_kinds import Warm
from profiling.integrity import TimingVerdict
from shared.models import (
    CompareResponse,
    IntegrityReport,
    JitCache,
    JobState,
    JudgeCalibration,
    KernelCode,
    Outcome,
    RuntimeStats,
    WorkerJob,
)
from shared.protocol import (
    Audited,
    Calibrated,
    Failure,
    JudgedTiming,
    KernelTimed,
    Resources,
    TensorMeta,
    TrialsPassed,
)

CUSTOM = KernelCode(source_code="class ModelNew: pass", kernel_type="torch")
REF = KernelCode(source_code="class Model: pass", kernel_type="torch")


def compare_job() -> WorkerJob:
    return WorkerJob(job_id="j1", kind="compare", kernel=CUSTOM, ref_kernel=REF, cache_dir="/c")


def step_at(side: Side, stage: Stage) -> JobStep:
    step = JobStep()
    step.set(side, stage)
    return step


def test_a_timeout_and_a_crash_carry_the_step_they_stopped_at_as_data() -> None:
    timed_out = verdicts.timed_out(compare_job(), 5, step_at(Side.KERNEL, Stage.AUDITING))
    assert timed_out.state == JobState.TIMED_OUT
    assert timed_out.stage == "checking a timed sample of the custom kernel"
    killed = signal.SIGKILL  # a status as os.waitpid reports a process killed by it
    crashed = verdicts.crashed(compare_job(), step_at(Side.REFERENCE, Stage.TIMING), [killed])
    assert crashed.stage == "timing the reference kernel"
    assert crashed.kernel_exec_result is not None
    assert crashed.kernel_exec_result.outcome == Outcome.NOT_RUN


# ---- the JSON users read, pinned: a comparison and an evaluation built through the assembly

H100 = "NVIDIA H100 80GB HBM3"


def timing(median_ms: float, regime: str = "isolated") -> TimingVerdict:
    stats = RuntimeStats(mean=median_ms, std=0.0, min=median_ms, max=median_ms,
                         median=median_ms, percentile_95=median_ms, percentile_99=median_ms,
                         num_samples=10)
    return TimingVerdict(stats=stats, report=IntegrityReport(checks=["timed"]),
                         figures={"regime": regime, "isolated_median_ms": median_ms})


def compared() -> Compared:
    where = Where("cuda", H100, 3)
    figure = Figure(timed=KernelTimed(timing=JudgedTiming(clock="cuda_events", trusted_ms=[2.0],
                                                          calibration_ms=[0.1]),
                                      resources=Resources(peak_memory_bytes=25),
                                      input_bytes=64, output_bytes=32),
                    timed_by_job="j0", gpu_state={"samples": 3})
    reference = Reference(process=KernelProcess(where, {}, ProcessSetup("1", None)),
                          verdict=timing(2.0), figure=figure, reused=True)
    candidate = Judged(
        process=KernelProcess(where, {"ptx": "//ptx"}, ProcessSetup("8", Warm("cublas"))),
        timed=Timed(timing(1.0), {"samples": 4}),
        held=Held(Resources(peak_memory_bytes=20, peak_shared_bytes=4096), 64, 32), trials=5,
        passed=TrialsPassed(ran=5, input_bytes=64, output_bytes=32,
                            reference_resources=Resources(peak_memory_bytes=30),
                            spent_ms={"call": 1.5}),
        calibrated=Calibrated(arena_bytes=4096, where="device", null_call_ms=[0.1]),
        calibration=JudgeCalibration(kept=True, taken_by_job="j0", age_ms=12.5),
        audited=Audited(checked=[3, 7], samples=10, spent_ms={"check": 0.5}),
        jit_cache=JitCache(restored=False, files=3, new_files=3, new_file_names=["a.so"],
                           kept_bytes=100),
        review_threshold=10.0)
    return Compared(reference, candidate)


def test_a_comparisons_json_has_the_keys_and_values_users_read() -> None:
    job = compare_job()
    result = verdicts.of(job, compared())
    step = step_at(Side.KERNEL, Stage.AUDITING)
    step.called(Side.KERNEL, "trials", 2.5)
    verdicts.retried_alone(result, 2)
    verdicts.with_worker_calls(result, step)
    verdicts.placed_on(result, "n1", "10.0.0.1", 1)
    response = verdicts.response(job.job_id, job.kind, result)
    ray = {"node_id": "n1", "address": "10.0.0.1", "attempts": 1}
    candidate = {
        "device": "cuda", "gpu_id": 3, "gpu_type": H100, "device_metrics": None,
        "artifacts": {"ptx": "//ptx"},
        "timing_figures": {"regime": "isolated", "isolated_median_ms": 1.0},
        "gpu_state": {"samples": 4},
        "work_queues": 8, "worker_warmed": "cublas", "worker_rehearsed": "all",
        "resources": {"peak_memory_bytes": 20, "peak_shared_bytes": 4096,
                      "device_free_bytes": None, "device_total_bytes": None,
                      "input_bytes": 64, "output_bytes": 32},
        "correctness_trials": 5, "tensor_transfer": "gpu", "arena_bytes": 4096,
        "arena_reused": False,
        "timed_sample_audit": {"audited": True, "checked": [3, 7], "samples": 10},
        "judge_spent_ms": {"trials.call": 1.5, "audit.check": 0.5},
        "judge_calibration": {"kept": True, "taken_by_job": "j0", "age_ms": 12.5},
        "speedup": 2.0, "speedup_statistic": "median",
        "reference_reused": True, "reference": {"reused": True, "timed_by_job": "j0"},
        "jit_cache": {"restored": False, "files": 3, "new_files": 3,
                      "new_file_names": ["a.so"], "kept_bytes": 100},
        "memory_retry": ("the first attempt ran out of GPU memory; this result is from a "
                         "second one, made after the last job's processes and 2 idle workers "
                         "were gone, with no other worker starting"),
        "worker_calls": {"custom.trials": {"calls": 1, "ms": 2.5}},
        "ray": ray,
    }
    reference = {
        "device": "cuda", "gpu_id": 3, "gpu_type": H100, "device_metrics": None,
        "timing_figures": {"regime": "isolated", "isolated_median_ms": 2.0},
        "gpu_state": {"samples": 3}, "work_queues": 1,
        # the larger of the peak its timing held and the one its trials held
        "resources": {"peak_memory_bytes": 30, "peak_shared_bytes": 0,
                      "device_free_bytes": None, "device_total_bytes": None,
                      "input_bytes": 64, "output_bytes": 32},
        "reused": True, "timed_by_job": "j0", "ray": ray,
    }
    # as the REST API sends it, and as the MCP tools do (their JSON drops nulls elsewhere)
    for sent in (json.loads(response.model_dump_json()), json.loads(as_json(response))):
        mine = sent["kernel_exec_result"]["metadata"]
        theirs = sent["ref_exec_result"]["metadata"]
        light, ref_light = mine.pop("speed_of_light"), theirs.pop("speed_of_light")
        assert mine == candidate
        assert theirs == reference
        # each side against the same bound; the candidate scored against the reference
        assert (light["candidate_ms"], light["reference_ms"]) == (1.0, 2.0)
        assert (ref_light["candidate_ms"], ref_light["reference_ms"]) == (2.0, 2.0)
        assert light["bound_ms"] == ref_light["bound_ms"] and light["bytes"] == 96
        assert light["score"] > 0.5 and ref_light["score"] == 0.5
    read = CompareResponse.model_validate_json(response.model_dump_json())
    assert read.kernel_exec_result is not None
    assert read.kernel_exec_result.metadata["speedup"] == 2.0
    assert read.kernel_exec_result.metadata.get("resources") == candidate["resources"]
    assert "output_tail" not in read.kernel_exec_result.metadata
    assert read.model_dump_json() == response.model_dump_json()


@pytest.mark.parametrize("side", ["reference", "candidate"])
def test_a_side_whose_median_is_zero_gives_no_speedup_and_says_why(side: str) -> None:
    facts = compared()
    zero = timing(0.0)
    if side == "reference":
        facts = replace(facts, reference=replace(facts.reference, verdict=zero))
    else:
        facts = replace(facts, candidate=replace(facts.candidate, timed=Timed(zero, None)))
    result = verdicts.of(compare_job(), facts).kernel_exec_result
    assert result is not None and result.metadata["speedup"] is None
    assert result.integrity is not None and not result.integrity.suspicious
    assert any(check.startswith("no speedup") and f"the {side}'s calls" in check
               for check in result.integrity.checks), result.integrity.checks


def test_an_evaluations_json_has_the_keys_and_values_users_read() -> None:
    job = WorkerJob(job_id="e1", kind="evaluate", kernel=CUSTOM, cache_dir="/c", device="cpu")
    facts = Evaluated(process=KernelProcess(Where("cpu", "cpu", None), {},
                                            ProcessSetup(None, None)),
                      outputs=[TensorMeta(dtype="float32", shape=[1024])],
                      held=Held(Resources(peak_memory_bytes=9), 64, 32),
                      timed=Timed(timing(1.5), None), jit_cache=None)
    result = verdicts.of(job, facts)
    verdicts.without_device_metrics(result, "cpu", "device metrics need a CUDA GPU")
    response = verdicts.response(job.job_id, job.kind, result)
    expected = {
        "device": "cpu", "gpu_id": None, "gpu_type": None,
        "timing_note": "CPU mode: timings are CPU wall-clock times, not GPU times",
        "device_metrics": {"available": False, "reason": "device metrics need a CUDA GPU",
                           "device": "cpu"},
        "outputs": ["float32[1024]"],
        "timing_figures": {"regime": "isolated", "isolated_median_ms": 1.5},
        "resources": {"peak_memory_bytes": 9, "peak_shared_bytes": 0,
                      "device_free_bytes": None, "device_total_bytes": None,
                      "input_bytes": 64, "output_bytes": 32},
    }
    for sent in (json.loads(response.model_dump_json()), json.loads(as_json(response))):
        light = sent["kernel_exec_result"]["metadata"].pop("speed_of_light")
        assert sent["kernel_exec_result"]["metadata"] == expected
        assert sent["kernel_exec_result"]["runtime"] == 1.5
        # no GPU, no peak figures: the block says so and scores nothing
        assert light["bytes"] == 96 and light.get("score") is None and light.get("bound_ms") is None
        assert any("no peak figures known" in note for note in light["notes"])
        assert "ref_exec_result" not in sent or sent["ref_exec_result"] is None


def test_a_failures_json_carries_only_what_applies_to_it() -> None:
    job = WorkerJob(job_id="e1", kind="evaluate", kernel=CUSTOM, cache_dir="/c")
    result = verdicts.crashed(job, step_at(Side.ALONE, Stage.RUNNING), [signal.SIGKILL],
                              "; the host ran out of memory")
    verdicts.with_output_tail(result, ["Traceback ...\n", "killed\n"])
    sent = json.loads(verdicts.response(job.job_id, job.kind, result).model_dump_json())
    verdict = sent["kernel_exec_result"]
    assert verdict["metadata"] == {"output_tail": "Traceback ...\nkilled\n"}
    assert verdict["runtime_error"] == ("the worker process was killed by signal SIGKILL while "
                                        "running the kernel; the host ran out of memory")


def test_the_reference_failing_makes_the_comparison_an_error_in_its_words() -> None:
    failure = Failure(outcome=Outcome.COMPILE_ERROR, message="SyntaxError at line 2")
    result = verdicts.of(compare_job(), Failed(Side.REFERENCE, failure))
    response = verdicts.response("j1", "compare", result)
    assert response.status == "error"
    assert response.error == "the reference kernel failed to compile: SyntaxError at line 2"
    assert response.kernel_exec_result is not None
    assert response.kernel_exec_result.outcome == Outcome.NOT_RUN
    assert response.ref_exec_result is not None and not response.ref_exec_result.compiled
