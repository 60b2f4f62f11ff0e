"""The compare flow against scripted workers: the order of its steps, and each way it ends."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestration import verdicts
from orchestration.flows.compare import compare
from orchestration.ref_cache import ReferenceFigures
from orchestration.references import KEEP_CALIBRATION_S
from orchestration.worker import WorkerDied
from shared.models import (
    KernelCode,
    Outcome,
    RobustnessCase,
    RobustnessReport,
    WorkerJob,
    WorkerResult,
)
from shared.protocol import (
    Audited,
    CallTrace,
    Failure,
    Incorrect,
    Message,
    PartnerFailed,
    PartnerGone,
    Robustness,
    RobustnessChecked,
)
from tests.unit.orchestration.fakes import (
    FakeJudges,
    FakeReferences,
    FakeSeat,
    FakeWorker,
    judge_script,
    kernel_script,
    kernel_timed,
)

REF = KernelCode(source_code="class Model: pass", kernel_type="torch")
CUSTOM = KernelCode(source_code="class ModelNew: pass", kernel_type="torch")


def job(**extra: object) -> WorkerJob:
    return WorkerJob(job_id="j1", kind="compare", kernel=CUSTOM, ref_kernel=REF, cache_dir="/c",
                     num_trials=10, num_correct_trials=5, **extra)  # type: ignore[arg-type]


def judged(the_job: WorkerJob, seat: FakeSeat, refs: FakeReferences) -> WorkerResult:
    """The result of the comparison's flow, as the executor assembles it from its facts."""
    return verdicts.of(the_job, asyncio.run(compare(the_job, seat, refs)))  # type: ignore[arg-type]


def run(tmp_path: Path, judge: FakeWorker, kernel: FakeWorker, the_job: WorkerJob | None = None,
        figures: ReferenceFigures | None = None) -> tuple[WorkerResult, FakeSeat, FakeReferences]:
    seat = FakeSeat([kernel])
    refs = FakeReferences(FakeJudges(judge), figures or ReferenceFigures(tmp_path / "refs", 2**20))
    result = judged(the_job or job(), seat, refs)
    return result, seat, refs


def test_a_passing_candidate_is_judged_in_order_and_gets_the_speedup_of_the_medians(
        tmp_path: Path) -> None:
    judge = FakeWorker("judge", judge_script(ref_ms=2.0, kernel_ms=1.0))
    kernel = FakeWorker("kernel", kernel_script())
    result, seat, refs = run(tmp_path, judge, kernel)
    # the reference is timed as the candidate is: a process of its own paired with the judge;
    # the first samples' inputs are made before the settled timing, not inside it
    assert judge.ops() == ["load", "pair", "calibrate", "prepare_samples", "time_kernel",
                           "unpair", "pair", "calibrate", "trials", "prepare_samples",
                           "time_kernel", "trials", "audit", "unpair"]
    assert seat.reference_partner.ops() == ["pair", "load"] and seat.reference_partner.killed
    assert kernel.ops() == ["pair", "load"]
    # the kernel's process goes once the recheck is in, before the judge's audit
    assert seat.log[-4:] == ["trials", "let go of the custom kernel", "audit", "unpair"]
    assert kernel.killed
    # the reference is timed, and its process gone, before the candidate is loaded anywhere;
    # the candidate's pairing takes the calibration the reference's measured, untimed
    assert seat.log.index("let go of the reference (timed)") < len(seat.log) - 1 - \
        seat.log[::-1].index("load")
    assert seat.timed_ops == ["calibrate", "time_kernel", "time_kernel"]
    verdict = result.kernel_exec_result
    assert verdict is not None and verdict.outcome == Outcome.SUCCESS and verdict.correctness
    assert verdict.metadata["speedup"] == pytest.approx(2.0)
    assert verdict.integrity is not None and not verdict.integrity.suspicious
    assert verdict.metadata["timed_sample_audit"]["checked"] == [3, 7]
    assert result.ref_exec_result is not None and result.ref_exec_result.runtime == pytest.approx(2.0)
    assert refs.judges.given_back == [True]  # kept for the next candidate


def test_a_candidates_process_is_asked_for_as_a_comparisons_not_as_a_kernel_alone(
        tmp_path: Path) -> None:
    judge = FakeWorker("judge", judge_script())
    _, seat, _ = run(tmp_path, judge, FakeWorker("kernel", kernel_script()))
    assert [n.alone for n in seat.needs] == [False, False]


def test_the_secret_goes_to_the_judge_and_never_to_the_kernels_process(tmp_path: Path) -> None:
    judge = FakeWorker("judge", judge_script())
    kernel = FakeWorker("kernel", kernel_script())
    run(tmp_path, judge, kernel)
    judge_pair = next(m for m in judge.requests if getattr(m, "op", "") == "pair")
    kernel_pair = next(m for m in kernel.requests if getattr(m, "op", "") == "pair")
    assert judge_pair.secret is not None and judge_pair.secret > 0  # type: ignore[attr-defined]
    assert kernel_pair.secret is None  # type: ignore[attr-defined]


def test_each_pairing_gets_a_secret_of_its_own(tmp_path: Path) -> None:
    secrets = []
    for _ in range(3):
        judge = FakeWorker("judge", judge_script())
        run(tmp_path, judge, FakeWorker("kernel", kernel_script()))
        secrets.append(next(m.secret for m in judge.requests  # type: ignore[attr-defined]
                            if getattr(m, "op", "") == "pair"))
    assert len(set(secrets)) == 3


def test_a_wrong_trial_is_incorrect_with_the_judges_words_and_no_timing(tmp_path: Path) -> None:
    judge = FakeWorker("judge", judge_script(trials=Incorrect(trial=2, problem="output: 7 of 9 "
                                                                "elements differ")))
    result, _, refs = run(tmp_path, judge, FakeWorker("kernel", kernel_script()))
    verdict = result.kernel_exec_result
    assert verdict is not None and verdict.outcome == Outcome.INCORRECT
    assert verdict.validation_error == "correctness trial 3 of 5: output: 7 of 9 elements differ"
    assert judge.ops().count("time_kernel") == 1  # the reference's only
    assert refs.judges.given_back == [True]


def test_a_kernel_that_raises_in_a_trial_gets_its_runtime_error(tmp_path: Path) -> None:
    failure = Failure(outcome=Outcome.RUNTIME_ERROR, message="IndexError: boom")
    judge = FakeWorker("judge", judge_script(trials=PartnerFailed(failure=failure,
                                                                  during="a trial")))
    result, _, _ = run(tmp_path, judge, FakeWorker("kernel", kernel_script()))
    verdict = result.kernel_exec_result
    assert verdict is not None and verdict.outcome == Outcome.RUNTIME_ERROR
    assert verdict.runtime_error == "IndexError: boom"
    assert result.ref_exec_result is not None and result.error is None


def test_a_kernel_that_does_not_compile_is_a_compile_error_beside_the_timed_reference(
        tmp_path: Path) -> None:
    kernel = FakeWorker("kernel", kernel_script(load=Failure(outcome=Outcome.COMPILE_ERROR,
                                                             message="SyntaxError at line 3")))
    judge = FakeWorker("judge", judge_script())
    result, _, _ = run(tmp_path, judge, kernel)
    verdict = result.kernel_exec_result
    assert verdict is not None and verdict.outcome == Outcome.COMPILE_ERROR
    assert verdict.compilation_error == "SyntaxError at line 3" and not verdict.compiled
    assert result.ref_exec_result is not None and result.ref_exec_result.runtime_stats is not None
    assert judge.ops()[-1] == "unpair"


def test_a_kernel_process_that_died_is_a_crash_of_the_custom_kernel(tmp_path: Path) -> None:
    judge = FakeWorker("judge", judge_script(timed=PartnerGone(during="timing")))
    seat = FakeSeat([FakeWorker("kernel", kernel_script())])
    refs = FakeReferences(FakeJudges(judge), ReferenceFigures(tmp_path / "refs", 2**20))
    with pytest.raises(WorkerDied):
        asyncio.run(compare(job(), seat, refs))  # type: ignore[arg-type]
    assert seat.step.side.value == "custom"
    assert refs.judges.given_back == [False]  # a judge whose job ended mid-step is not kept


def test_a_reference_that_fails_in_the_trials_is_the_references_verdict(tmp_path: Path) -> None:
    judge = FakeWorker("judge", judge_script(trials=Failure(outcome=Outcome.RUNTIME_ERROR,
                                                            message="ZeroDivisionError")))
    result, _, refs = run(tmp_path, judge, FakeWorker("kernel", kernel_script()))
    assert result.ref_exec_result is not None
    assert result.ref_exec_result.runtime_error == "ZeroDivisionError"
    assert result.kernel_exec_result is not None
    assert result.kernel_exec_result.outcome == Outcome.NOT_RUN
    assert result.error == "the reference kernel failed to run"
    assert refs.judges.given_back == [False]


def test_a_timed_sample_the_audit_finds_wrong_fails_the_kernel_as_cheating(tmp_path: Path) -> None:
    judge = FakeWorker("judge", judge_script(audited=Audited(
        checked=[4], samples=10, problem="timed sample 5: output differs", wrong_sample=4)))
    result, _, _ = run(tmp_path, judge, FakeWorker("kernel", kernel_script()))
    verdict = result.kernel_exec_result
    assert verdict is not None and verdict.outcome == Outcome.INCORRECT
    assert verdict.integrity is not None and verdict.integrity.suspicious
    assert verdict.metadata["timed_sample_audit"]["wrong_sample"] == 4


def test_a_wrong_recheck_after_timing_is_incorrect_and_flagged(tmp_path: Path) -> None:
    judge = FakeWorker("judge", judge_script(recheck=Incorrect(trial=5, problem="stale",
                                                               recheck=True)))
    result, _, _ = run(tmp_path, judge, FakeWorker("kernel", kernel_script()))
    verdict = result.kernel_exec_result
    assert verdict is not None and verdict.outcome == Outcome.INCORRECT
    assert verdict.validation_error is not None and "after timing" in verdict.validation_error
    assert verdict.integrity is not None and verdict.integrity.suspicious


def test_the_published_figures_are_the_judges_less_its_hand_over_and_read_once(
        tmp_path: Path) -> None:
    """Both sides on the judge's clock: 1.2 ms intervals less the 0.2 ms hand-over are 1 ms;
    a candidate's reading is never taken again."""
    judge = FakeWorker("judge", judge_script(ref_ms=2.0, timed=kernel_timed([1.0] * 10)))
    result, seat, _ = run(tmp_path, judge, FakeWorker("kernel", kernel_script()))
    verdict = result.kernel_exec_result
    assert verdict is not None and verdict.outcome == Outcome.SUCCESS
    assert verdict.runtime_stats is not None
    assert verdict.runtime_stats.median == pytest.approx(1.0)
    assert verdict.runtime == pytest.approx(1.0)
    assert verdict.metadata["speedup"] == pytest.approx(2.0)
    assert verdict.metadata["timing_figures"]["handover_ms"] == pytest.approx(0.2)
    assert seat.timed_ops.count("time_kernel") == 2  # the reference's, the candidate's


def test_a_disturbed_reference_reading_is_taken_again_and_a_disturbed_candidates_is_not(
        tmp_path: Path) -> None:
    spread = [1.0] * 4 + [3.0] * 6  # a median far above its fastest samples
    readings: list[float] = []
    base = judge_script(ref_ms=1.0, timed=kernel_timed(spread))

    def script(message: Message) -> Message:
        if getattr(message, "op", "") == "time_kernel" and \
                getattr(message, "reference_ms", 0.0) == 0.0:
            readings.append(1.0)
            return kernel_timed(spread if len(readings) == 1 else [1.5] * 10)
        return base(message)

    result, seat, _ = run(tmp_path, FakeWorker("judge", script),
                          FakeWorker("kernel", kernel_script()))
    assert len(readings) == 2
    assert seat.timed_ops.count("time_kernel") == 3
    assert result.ref_exec_result is not None and result.ref_exec_result.runtime_stats is not None
    assert result.ref_exec_result.runtime_stats.median == pytest.approx(1.5)


def test_on_the_cpu_the_reference_is_read_twice_and_the_faster_reading_kept(
        tmp_path: Path) -> None:
    """A whole reading slowed by the host shows nothing in its samples' spread: on the CPU
    the reference is read twice, whatever the first read, and the faster reading stands."""
    readings = iter([[4.0] * 10, [1.0] * 10])
    base = judge_script()

    def script(message: Message) -> Message:
        if getattr(message, "op", "") == "time_kernel" and \
                getattr(message, "reference_ms", 0.0) == 0.0:
            return kernel_timed(next(readings))
        return base(message)

    seat = FakeSeat([FakeWorker("kernel", kernel_script())])
    seat.device = "cpu"  # type: ignore[misc]
    refs = FakeReferences(FakeJudges(FakeWorker("judge", script)),
                          ReferenceFigures(tmp_path / "refs", 2**20))
    result = judged(job(), seat, refs)
    assert seat.timed_ops.count("time_kernel") == 3  # the reference twice, the candidate
    assert result.ref_exec_result is not None and result.ref_exec_result.runtime_stats is not None
    assert result.ref_exec_result.runtime_stats.median == pytest.approx(1.0)


def test_a_reference_disturbed_on_both_readings_serves_its_comparison_but_is_never_kept(
        tmp_path: Path) -> None:
    """A reference timed while another job's leftover work ran (its median far above its
    fastest samples) is read again; disturbed again, it is this comparison's figure and no
    later comparison's: the next one times the reference afresh."""
    spread = [1.0] * 4 + [3.0] * 6
    figures = ReferenceFigures(tmp_path / "refs", 2**20)

    def disturbed(message: Message) -> Message:
        if getattr(message, "op", "") == "time_kernel" and \
                getattr(message, "reference_ms", 0.0) == 0.0:
            return kernel_timed(spread)
        return judge_script()(message)

    first = FakeWorker("judge", disturbed)
    run(tmp_path, first, FakeWorker("kernel", kernel_script()), figures=figures)
    assert first.ops().count("time_kernel") == 3  # the reference twice, the candidate
    second = FakeWorker("judge", judge_script(ref_ms=2.0))
    result, _, _ = run(tmp_path, second, FakeWorker("kernel", kernel_script()),
                       figures=figures)
    assert second.ops().count("time_kernel") == 2
    assert result.ref_exec_result is not None
    assert result.ref_exec_result.runtime == pytest.approx(2.0)


def test_a_second_comparison_of_the_same_reference_reuses_its_figure(tmp_path: Path) -> None:
    figures = ReferenceFigures(tmp_path / "refs", 2**20)
    first = FakeWorker("judge", judge_script(ref_ms=2.0))
    run(tmp_path, first, FakeWorker("kernel", kernel_script()), figures=figures)
    second = FakeWorker("judge", judge_script(ref_ms=9.0))  # would read otherwise
    result, seat, _ = run(tmp_path, second, FakeWorker("kernel", kernel_script()),
                          figures=figures)
    assert second.ops().count("time_kernel") == 1 and not seat.reference_partner.ops()
    assert result.ref_exec_result is not None and result.ref_exec_result.runtime == pytest.approx(2.0)
    verdict = result.kernel_exec_result
    assert verdict is not None and verdict.metadata["reference_reused"] is True
    assert verdict.metadata["reference"]["timed_by_job"] == "j1"


def test_reuse_reference_false_times_the_reference_again(tmp_path: Path) -> None:
    figures = ReferenceFigures(tmp_path / "refs", 2**20)
    run(tmp_path, FakeWorker("judge", judge_script()), FakeWorker("kernel", kernel_script()),
        figures=figures)
    again = FakeWorker("judge", judge_script())
    run(tmp_path, again, FakeWorker("kernel", kernel_script()), job(reuse_reference=False),
        figures=figures)
    assert again.ops().count("time_kernel") == 2


def candidates(tmp_path: Path, judge: FakeWorker, sources: list[str],
               between: Callable[[FakeReferences], None] = lambda refs: None,
               ) -> list[tuple[WorkerResult, FakeSeat]]:
    """Candidates of ``sources`` compared one after another against one kept judge (as a
    batch's are); ``between`` runs before each one after the first."""
    refs = FakeReferences(FakeJudges(judge), ReferenceFigures(tmp_path / "refs", 2**20))
    done = []
    for i, source in enumerate(sources):
        if i:
            between(refs)
        seat = FakeSeat([FakeWorker("kernel", kernel_script())])
        the_job = job().model_copy(update={
            "job_id": f"j{i + 1}", "kernel": KernelCode(source_code=source, kernel_type="torch")})
        done.append((judged(the_job, seat, refs), seat))
    return done


def calibrations(judge: FakeWorker) -> list[bool]:
    """Each Calibrate the judge got: whether it asked for the kept figure."""
    return [bool(getattr(m, "kept", False)) for m in judge.requests
            if getattr(m, "op", "") == "calibrate"]


def test_a_judges_next_candidate_is_calibrated_by_the_figure_it_measured_untimed(
        tmp_path: Path) -> None:
    judge = FakeWorker("judge", judge_script())
    (first, first_seat), (second, second_seat) = candidates(tmp_path, judge, [CUSTOM.source_code,
                                                                               CUSTOM.source_code])
    assert first_seat.timed_ops == ["calibrate", "time_kernel", "time_kernel"]
    # the second candidate waits for no settled device before it is loaded and checked
    assert second_seat.timed_ops == ["time_kernel"]
    assert calibrations(judge) == [False, True, True]
    assert second_seat.log.index("calibrate") < second_seat.log.index("load")
    for verdict in (first.kernel_exec_result, second.kernel_exec_result):
        assert verdict is not None and verdict.outcome == Outcome.SUCCESS
        assert verdict.metadata["judge_calibration"]["kept"] is True
        # (the reference's pairing measured it, in the first job)
        assert verdict.metadata["judge_calibration"]["taken_by_job"] == "j1"


def test_a_calibration_older_than_the_keep_time_is_measured_again(tmp_path: Path) -> None:
    def age(refs: FakeReferences) -> None:
        kept = refs.judges.leased.calibration if refs.judges.leased else None
        assert kept is not None
        kept.taken_at -= KEEP_CALIBRATION_S + 0.5

    judge = FakeWorker("judge", judge_script())
    (_, _), (second, seat) = candidates(tmp_path, judge, [CUSTOM.source_code] * 2, age)
    assert seat.timed_ops == ["calibrate", "time_kernel"]
    assert calibrations(judge) == [False, True, False]
    assert second.kernel_exec_result is not None
    note = second.kernel_exec_result.metadata["judge_calibration"]
    assert note["kept"] is False and note["not_kept"].startswith("older than"), note


def test_the_job_that_timed_the_reference_keeps_its_calibration_whatever_its_age(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Slow:
        """A clock each reading of which is later than the keep time after the last."""

        def __init__(self) -> None:
            self.now = 0.0

        def monotonic(self) -> float:
            self.now += KEEP_CALIBRATION_S + 0.5
            return self.now

    monkeypatch.setattr("orchestration.flows.compare.time", Slow())
    judge = FakeWorker("judge", judge_script())
    (first, first_seat), (second, second_seat) = candidates(tmp_path, judge,
                                                            [CUSTOM.source_code] * 2)
    # job 1 measured it timing its reference, and its candidate is judged by it; job 2 is
    # another comparison, and the figure is old by then
    assert first_seat.timed_ops == ["calibrate", "time_kernel", "time_kernel"]
    assert second_seat.timed_ops == ["calibrate", "time_kernel"]
    assert first.kernel_exec_result is not None and second.kernel_exec_result is not None
    assert first.kernel_exec_result.metadata["judge_calibration"]["kept"] is True
    note = second.kernel_exec_result.metadata["judge_calibration"]
    assert note["kept"] is False and note["not_kept"].startswith("older than"), note


def test_a_judge_that_holds_no_calibration_is_calibrated_on_a_settled_device(
        tmp_path: Path) -> None:
    judge = FakeWorker("judge", judge_script(kept=False))
    (_, _), (second, seat) = candidates(tmp_path, judge, [CUSTOM.source_code] * 2)
    assert calibrations(judge) == [False, True, False, True, False]
    assert seat.timed_ops == ["calibrate", "time_kernel"]
    assert second.kernel_exec_result is not None
    note = second.kernel_exec_result.metadata["judge_calibration"]
    assert note["kept"] is False and note["not_kept"].startswith("the judge held none"), note


def test_a_candidate_made_for_streams_is_not_calibrated_by_a_partner_with_one_queue(
        tmp_path: Path) -> None:
    streams = "s = torch.cuda.Stream()\n" + CUSTOM.source_code
    judge = FakeWorker("judge", judge_script())
    candidates(tmp_path, judge, [CUSTOM.source_code, streams, streams])
    assert calibrations(judge) == [False, True, False, True]


def _unexpected(message: Message) -> Message:
    raise AssertionError(message)


def test_the_audit_of_timed_samples_is_a_stage_of_its_own_not_part_of_correctness(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a clock that moves only while the judge audits (1 s) or runs its trials (2 s)
    from orchestration import job_step

    now = [0.0]
    monkeypatch.setattr(job_step.time, "perf_counter", lambda: now[0])
    script = judge_script(ref_ms=2.0, kernel_ms=1.0)

    def judge_answers(message: Message) -> Message:
        op = getattr(message, "op", "")
        now[0] += {"audit": 1.0, "trials": 2.0}.get(op, 0.0)
        return script(message)

    result, seat, _ = run(tmp_path, FakeWorker("judge", judge_answers),
                          FakeWorker("kernel", kernel_script()))
    assert result.kernel_exec_result is not None
    stages = seat.clock.stages
    assert stages["audit"] == pytest.approx(1000.0)
    # the trials and the recheck after timing
    assert stages["correctness"] == pytest.approx(4000.0)


def test_a_judge_is_told_which_earlier_pairings_no_process_maps_any_more(
        tmp_path: Path) -> None:
    def gone(refs: FakeReferences) -> None:
        leased = refs.judges.leased
        assert leased is not None
        for number, kernel in leased.partners.items():
            kernel.status = 0  # reaped
            if number == 2:  # gone, but not in a pid namespace of its own: a child may live on
                kernel.contained = False

    judge = FakeWorker("judge", judge_script())
    candidates(tmp_path, judge, [CUSTOM.source_code] * 3, gone)
    pairs = [m for m in judge.requests if getattr(m, "op", "") == "pair"]
    # the first job's two pairings (the reference's, its candidate's), then one a candidate
    assert [getattr(m, "pairing", None) for m in pairs] == [1, 2, 3, 4]
    frees = [getattr(m, "free", None) for m in judge.requests
             if getattr(m, "op", "") == "calibrate"]
    assert frees == [[], [], [1], [1, 3]]


def robustness_report(*statuses: str) -> RobustnessReport:
    return RobustnessReport.of([RobustnessCase(name=f"case_{i}", kind="scale",
                                               status=s)  # type: ignore[arg-type]
                                for i, s in enumerate(statuses)], "none declared", 5.0)


def test_robustness_asked_for_runs_after_the_recheck_as_a_stage_of_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestration import job_step

    now = [0.0]
    monkeypatch.setattr(job_step.time, "perf_counter", lambda: now[0])
    script = judge_script(robust=RobustnessChecked(report=robustness_report("passed",
                                                                            "skipped")))

    def judge_answers(message: Message) -> Message:
        now[0] += {"robustness": 3.0, "trials": 2.0}.get(getattr(message, "op", ""), 0.0)
        return script(message)

    judge = FakeWorker("judge", judge_answers)
    result, seat, _ = run(tmp_path, judge, FakeWorker("kernel", kernel_script()),
                          job(robustness=True))
    # after the recheck, while the kernel's process is still there; its calls numbered after
    # the five trials and the recheck
    assert seat.log[-5:] == ["trials", "robustness", "let go of the custom kernel", "audit",
                             "unpair"]
    asked = next(m for m in judge.requests if isinstance(m, Robustness))
    assert asked.first == 6
    verdict = result.kernel_exec_result
    assert verdict is not None and verdict.outcome == Outcome.SUCCESS
    block = verdict.metadata["robustness"]
    assert RobustnessReport.model_validate(block) == robustness_report("passed", "skipped")
    assert seat.clock.stages["robustness"] == pytest.approx(3000.0)
    assert seat.clock.stages["correctness"] == pytest.approx(4000.0)


def test_a_failed_robustness_case_leaves_the_verdict_the_trials_gave(tmp_path: Path) -> None:
    judge = FakeWorker("judge", judge_script(
        robust=RobustnessChecked(report=robustness_report("passed", "failed"))))
    result, _, _ = run(tmp_path, judge, FakeWorker("kernel", kernel_script()),
                       job(robustness=True))
    verdict = result.kernel_exec_result
    assert verdict is not None and verdict.outcome == Outcome.SUCCESS and verdict.correctness
    assert verdict.integrity is not None and not verdict.integrity.suspicious
    block = verdict.metadata["robustness"]
    assert block["all_passed"] is False and block["failed"] == 1


def test_robustness_off_asks_the_judge_nothing_and_adds_nothing(tmp_path: Path) -> None:
    judge = FakeWorker("judge", judge_script())
    result, _, _ = run(tmp_path, judge, FakeWorker("kernel", kernel_script()))
    assert "robustness" not in judge.ops()
    assert result.kernel_exec_result is not None
    assert "robustness" not in result.kernel_exec_result.metadata


TRACE = CallTrace(device="cuda", unobservable="traced by the reference's own process",
                  input_dtypes=["float32"])


def host_bound_judge(beside: Message | None = None, ref_ms: float = 2.0,
                     beside_samples: int = 10, beside_ms: list[float] | None = None,
                     candidate_ms: list[float] | None = None) -> FakeWorker:
    """A judge whose reference reads host-bound on its own (every call released early), and
    whose candidate's timing (``candidate_ms``, else ten of 1.0 ms), asked for beside a
    reference's process, brings that reading (``beside_ms``, else ``beside_samples`` of
    1.5 ms)."""
    inner = judge_script()
    taken_beside = kernel_timed(beside_ms or [1.5] * beside_samples, released_early=10,
                                interleaved=True).timing

    def script(message: Message) -> Message:
        if getattr(message, "op", "") != "time_kernel":
            return inner(message)
        if getattr(message, "reference_ms", 0.0) == 0.0:  # the reference's own reading
            return kernel_timed([ref_ms] * 10, released_early=10, kernel_trace=TRACE)
        if beside is not None:
            return beside
        return kernel_timed(candidate_ms or [1.0] * 10, released_early=10, interleaved=True,
                            ).model_copy(update={"beside": taken_beside
                                                 if getattr(message, "beside", False) else None})
    return FakeWorker("judge", script)


def test_a_host_bound_reference_is_timed_again_beside_the_candidate_and_that_reading_counts(
        tmp_path: Path) -> None:
    judge = host_bound_judge(ref_ms=2.0)
    result, seat, _ = run(tmp_path, judge, FakeWorker("kernel", kernel_script()))
    beside = [m for m in judge.requests if getattr(m, "beside", False)]
    assert [getattr(m, "op", "") for m in beside] == ["pair", "calibrate", "time_kernel",
                                                      "unpair"]
    # paired and calibrated after the trials, before the candidate's samples are prepared
    ops = judge.ops()
    first_beside = judge.requests.index(beside[0])
    assert ops[first_beside - 1] == "trials" and ops[first_beside + 2] == "prepare_samples"
    # a fresh process of the reference: paired, loaded once calibrated, let go after the timing
    assert seat.reference_partner.ops() == ["pair", "load", "pair", "load"]
    assert "let go of the reference (timed beside)" in seat.log
    assert seat.log.index("let go of the reference (timed beside)") < seat.log.index("audit")
    verdict, reference = result.kernel_exec_result, result.ref_exec_result
    assert verdict is not None and reference is not None
    # the speedup is the reading taken beside (1.5 ms), not the reference's own (2.0 ms)
    assert verdict.metadata["speedup"] == pytest.approx(1.5)
    assert reference.runtime_stats is not None
    assert reference.runtime_stats.median == pytest.approx(1.5)
    assert reference.integrity is not None
    assert any(c.startswith("timed beside the comparison's other side")
               for c in reference.integrity.checks)
    assert verdict.metadata["reference"]["timed_by_job"] == "j1"
    assert verdict.metadata["reference"]["reused"] is False
    # the reference's own traced call, from its own reading, stays its provenance
    provenance = reference.metadata["provenance"]
    assert "traced by the reference's own process" in provenance["cannot_see"]
    assert provenance["judged_ms"] == pytest.approx(1.5)


def test_a_reading_beside_publishes_the_median_of_the_per_sample_ratios_as_the_speedup(
        tmp_path: Path) -> None:
    # each side's samples fell between a slow stretch of the host (2 ms) and a fast one (1 ms)
    # in different numbers, but each pair met the same stretch: the ratio of the two medians
    # would read 2.0 for identical work, the pairs read 1.0
    reference_ms = [2.0] * 6 + [1.0] * 4
    candidate_ms = [2.0] * 4 + [1.0] * 6
    judge = host_bound_judge(beside_ms=reference_ms, candidate_ms=candidate_ms)
    result, _, _ = run(tmp_path, judge, FakeWorker("kernel", kernel_script()))
    verdict, reference = result.kernel_exec_result, result.ref_exec_result
    assert verdict is not None and reference is not None
    assert reference.runtime_stats is not None and reference.runtime_stats.median == 2.0
    assert verdict.metadata["speedup"] == pytest.approx(1.0)
    assert verdict.metadata["speedup_statistic"] == "median_of_paired_ratios"
    assert verdict.integrity is not None
    assert any(c.startswith("speedup: the median of 10 per-sample ratios")
               for c in verdict.integrity.checks), verdict.integrity.checks


def test_a_reference_that_reads_far_slower_beside_the_candidate_than_alone_is_flagged(
        tmp_path: Path) -> None:
    # alone 1.0 ms; beside the candidate 2.5 ms a sample: the candidate's process (a thread
    # on the core the two share, GPU work left running) may have slowed it
    judge = host_bound_judge(ref_ms=1.0, beside_ms=[2.5] * 10, candidate_ms=[1.0] * 10)
    result, _, _ = run(tmp_path, judge, FakeWorker("kernel", kernel_script()))
    verdict = result.kernel_exec_result
    assert verdict is not None and verdict.integrity is not None
    assert verdict.metadata["speedup"] == pytest.approx(2.5)
    assert verdict.integrity.suspicious
    assert any("read 2.5x its own reading" in r for r in verdict.integrity.reasons), \
        verdict.integrity.reasons


def test_a_reference_that_reads_isolated_is_not_timed_beside(tmp_path: Path) -> None:
    judge = FakeWorker("judge", judge_script(ref_ms=2.0))
    kernel = FakeWorker("kernel", kernel_script())
    run(tmp_path, judge, kernel, job(timing_cores=[3]))
    assert not any(getattr(m, "beside", False) for m in judge.requests)
    assert kernel.requests[0].yield_cores is None  # type: ignore[attr-defined]


def test_beside_a_host_bound_reference_the_candidates_process_yields_the_timing_core(
        tmp_path: Path) -> None:
    """From its pairing, before its code is loaded; the reference's processes do not."""
    kernel = FakeWorker("kernel", kernel_script())
    _, seat, _ = run(tmp_path, host_bound_judge(), kernel, job(timing_cores=[3]))
    pair = kernel.requests[0]
    assert getattr(pair, "op", "") == "pair" and kernel.ops()[1] == "load"
    assert pair.yield_cores == [3]  # type: ignore[attr-defined]
    pairs = [m for m in seat.reference_partner.requests if getattr(m, "op", "") == "pair"]
    assert len(pairs) == 2 and all(m.yield_cores is None for m in pairs)  # type: ignore[attr-defined]


def test_a_reference_process_that_fails_beside_the_candidate_is_the_references_failure(
        tmp_path: Path) -> None:
    judge = host_bound_judge(beside=Failure(outcome=Outcome.RUNTIME_ERROR,
                                            message="the reference's process, timed beside "
                                                    "the candidate's, failed: it hung"))
    result, seat, _ = run(tmp_path, judge, FakeWorker("kernel", kernel_script()))
    assert result.ref_exec_result is not None
    assert result.ref_exec_result.runtime_error is not None
    assert "timed beside" in result.ref_exec_result.runtime_error
    assert result.error == "the reference kernel failed to run"
    # its pairing still ended and its process went
    assert "let go of the reference (timed beside)" in seat.log
    assert any(getattr(m, "op", "") == "unpair" and getattr(m, "beside", False)
               for m in judge.requests)


def test_a_reference_beside_that_cannot_be_set_up_leaves_the_references_own_reading(
        tmp_path: Path) -> None:
    inner = host_bound_judge(ref_ms=2.0)

    def script(message: Message) -> Message:
        if getattr(message, "op", "") == "calibrate" and getattr(message, "beside", False):
            return Failure(outcome=Outcome.RUNTIME_ERROR, out_of_memory=True,
                           message="a second arena does not fit beside the first")
        return inner.script(message)

    judge = FakeWorker("judge", script)
    result, seat, _ = run(tmp_path, judge, FakeWorker("kernel", kernel_script()))
    verdict = result.kernel_exec_result
    assert verdict is not None and verdict.outcome == Outcome.SUCCESS
    # the reference's own (host-bound) reading stands: 2.0 ms against the candidate's 1.0
    assert verdict.metadata["speedup"] == pytest.approx(2.0)
    assert "let go of the reference (timed beside)" in seat.log
    ops = [(getattr(m, "op", ""), getattr(m, "beside", False)) for m in judge.requests]
    assert ("unpair", True) in ops
    assert ("time_kernel", True) not in ops


def test_a_reading_beside_that_does_not_add_up_leaves_the_references_own_reading(
        tmp_path: Path) -> None:
    # 7 samples where the request fixed 10, and nothing says the run was cut short
    judge = host_bound_judge(ref_ms=2.0, beside_samples=7)
    result, _, _ = run(tmp_path, judge, FakeWorker("kernel", kernel_script()))
    verdict = result.kernel_exec_result
    assert verdict is not None and verdict.outcome == Outcome.SUCCESS
    assert verdict.metadata["speedup"] == pytest.approx(2.0)


def test_a_candidate_that_fails_while_timed_beside_the_reference_is_the_candidates_failure(
        tmp_path: Path) -> None:
    failure = Failure(outcome=Outcome.RUNTIME_ERROR, message="IndexError: late")
    judge = host_bound_judge(beside=PartnerFailed(failure=failure, during="timing"))
    result, seat, _ = run(tmp_path, judge, FakeWorker("kernel", kernel_script()))
    verdict = result.kernel_exec_result
    assert verdict is not None and verdict.outcome == Outcome.RUNTIME_ERROR
    assert verdict.runtime_error == "IndexError: late"
    assert result.ref_exec_result is not None and result.error is None
    # the pairing beside ended all the same
    assert "let go of the reference (timed beside)" in seat.log


def test_a_candidate_process_that_dies_while_timed_beside_is_a_crash_of_the_custom_kernel(
        tmp_path: Path) -> None:
    judge = host_bound_judge(beside=PartnerGone(during="timing"))
    seat = FakeSeat([FakeWorker("kernel", kernel_script())])
    refs = FakeReferences(FakeJudges(judge), ReferenceFigures(tmp_path / "refs", 2**20))
    with pytest.raises(WorkerDied):
        asyncio.run(compare(job(), seat, refs))  # type: ignore[arg-type]
    # the pairing beside ended first, and the step it left is the candidate's timing's
    assert "let go of the reference (timed beside)" in seat.log
    assert (seat.step.side.value, seat.step.stage.value) == ("custom", "timing")
