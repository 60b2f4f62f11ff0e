"""The suite's pure parts: layout discovery, ``--small`` rewriting, fast_p, verdicts, the table;
and the ``kernel-eval suite`` command against a fake server (httpx.MockTransport)."""

from __future__ import annotations

import json
import re
import runpy
from pathlib import Path
from typing import Any

import httpx
import pytest
from kernel_eval_client import cli
from kernel_eval_client.models import CompareResponse, HealthResponse, KernelType
from kernel_eval_client.suite import (
    LayoutError,
    RunResult,
    SuiteOptions,
    SuiteReport,
    Verdict,
    apply_small_sizes,
    build_report,
    discover,
    error_line,
    fast_p,
    fast_p_by_problem,
    format_report,
    select,
    skip_reason,
    verdict_of,
)

PROBLEM = '''"""x * 2"""
import torch

N = 65536  # small: 4


class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''
MODEL_NEW = "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return {}\n"
GOOD = "# kernel-eval: expected=correct\n" + MODEL_NEW.format("x + x")
BAD = "# kernel-eval: expected=incorrect\n" + MODEL_NEW.format("x")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def make_suite(root: Path, problems: dict[str, dict[str, str]]) -> Path:
    for name, solutions in problems.items():
        write(root / name / "problem.py", PROBLEM)
        for solution, source in solutions.items():
            write(root / name / "solutions" / f"{solution}.py", source)
    return root


# ---- layout --------------------------------------------------------------------------------------


def test_discover_reads_problems_solutions_and_their_declarations(tmp_path: Path) -> None:
    make_suite(tmp_path, {
        "b_second": {"eager": GOOD},
        "a_first": {
            "wrong": BAD,
            "cuda": "# kernel-eval: kernel_type=torch_cuda expected=correct\nclass ModelNew: ...\n",
            "cupy": "import cupy\n# kernel-eval: requires=gpu\nclass ModelNew: ...\n",
        },
    })
    write(tmp_path / "a_first" / "problem.py", "# kernel-eval: atol=1e-3 rtol=2e-3\n" + PROBLEM)

    problems = discover(tmp_path)

    assert [p.name for p in problems] == ["a_first", "b_second"]
    first = problems[0]
    assert (first.atol, first.rtol) == (1e-3, 2e-3)
    assert problems[1].atol is None
    by_name = {s.name: s for s in first.solutions}
    assert sorted(by_name) == ["cuda", "cupy", "wrong"]
    assert by_name["cuda"].kernel_type is KernelType.TORCH_CUDA
    assert by_name["cuda"].expected is Verdict.CORRECT
    assert by_name["wrong"].expected is Verdict.INCORRECT
    assert by_name["wrong"].kernel_type is None  # the suite's default decides
    assert by_name["cupy"].requires_gpu and by_name["cupy"].expected is None
    assert by_name["wrong"].id == "a_first/wrong"
    assert by_name["wrong"].source == BAD


def test_a_directory_that_holds_problem_py_is_a_suite_of_one(tmp_path: Path) -> None:
    make_suite(tmp_path, {"only": {"eager": GOOD}})
    problems = discover(tmp_path / "only")
    assert [(p.name, [s.name for s in p.solutions]) for p in problems] == [("only", ["eager"])]


def test_hidden_and_underscore_entries_are_not_problems_or_solutions(tmp_path: Path) -> None:
    make_suite(tmp_path, {"p": {"eager": GOOD, "_helpers": "X = 1\n"}})
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / ".git").mkdir()
    write(tmp_path / "README.md", "notes\n")
    problems = discover(tmp_path)
    assert [p.name for p in problems] == ["p"]
    assert [s.name for s in problems[0].solutions] == ["eager"]


def test_a_problem_without_solutions_is_kept_with_none(tmp_path: Path) -> None:
    make_suite(tmp_path, {"bare": {}, "full": {"eager": GOOD}})
    problems = discover(tmp_path)
    assert [(p.name, len(p.solutions)) for p in problems] == [("bare", 0), ("full", 1)]


def test_a_directory_without_problem_py_is_a_layout_error(tmp_path: Path) -> None:
    make_suite(tmp_path, {"ok": {"eager": GOOD}})
    write(tmp_path / "stray" / "solutions" / "x.py", GOOD)
    with pytest.raises(LayoutError, match=r"stray has no problem\.py"):
        discover(tmp_path)


def test_an_empty_directory_is_a_layout_error(tmp_path: Path) -> None:
    with pytest.raises(LayoutError, match="no problems"):
        discover(tmp_path)


@pytest.mark.parametrize(
    ("where", "line", "message"),
    [
        ("solution", "# kernel-eval: kernel_type=fortran", "unknown kernel_type 'fortran'"),
        ("solution", "# kernel-eval: expected=maybe", "'correct' or 'incorrect'"),
        ("solution", "# kernel-eval: requires=tpu", "requires= must be 'gpu'"),
        ("solution", "# kernel-eval: colour=red", "unknown key 'colour'"),
        ("solution", "# kernel-eval: atol=1e-3", "unknown key 'atol'"),  # a problem's key
        ("solution", "# kernel-eval: expected", "expected key=value"),
        ("solution", "# kernel-eval: expected=correct expected=incorrect", "declared twice"),
        ("problem", "# kernel-eval: atol=tight", "atol= must be a number"),
        ("problem", "# kernel-eval: rtol=-1", "must not be negative"),
        ("problem", "# kernel-eval: expected=correct", "unknown key 'expected'"),
    ],
)
def test_bad_declarations_are_layout_errors_naming_the_file_and_line(
    tmp_path: Path, where: str, line: str, message: str
) -> None:
    make_suite(tmp_path, {"p": {"s": "class ModelNew: ...\n"}})
    target = tmp_path / "p" / ("problem.py" if where == "problem" else "solutions/s.py")
    write(target, "import torch\n" + line + "\n" + target.read_text())
    with pytest.raises(LayoutError, match=re.escape(message)) as caught:
        discover(tmp_path)
    assert target.name in str(caught.value)


def test_select_matches_problem_names_or_problem_solution_ids(tmp_path: Path) -> None:
    problems = discover(make_suite(tmp_path, {
        "08_softmax": {"eager": GOOD, "triton_kernel": GOOD},
        "09_layernorm": {"eager": GOOD, "triton_kernel": GOOD},
    }))

    def ids(patterns: list[str]) -> list[str]:
        return [s.id for s in select(problems, patterns)]

    assert len(ids([])) == 4
    assert ids(["*softmax*"]) == ["08_softmax/eager", "08_softmax/triton_kernel"]
    assert ids(["*/triton*"]) == ["08_softmax/triton_kernel", "09_layernorm/triton_kernel"]
    assert ids(["09_*", "08_softmax/eager"]) == [
        "08_softmax/eager", "09_layernorm/eager", "09_layernorm/triton_kernel",
    ]
    assert ids(["eager"]) == []  # without a slash a pattern names problems, not solutions


# ---- --small -------------------------------------------------------------------------------------


def test_small_rewrites_marked_constants_and_keeps_the_full_value_in_a_comment() -> None:
    source = "N = 65536  # small: 64\nM = N * 2\n"
    assert apply_small_sizes(source) == "N = 64  # full: 65536\nM = N * 2\n"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("M, K = 4096, 8192  # small: 8, 16", "M, K = 8, 16  # full: 4096, 8192"),
        ("N: int = 1 << 20  # small: 32", "N: int = 32  # full: 1 << 20"),
        ("SHAPE = (16, 64, 256)  #small:(2, 4, 8)", "SHAPE = (2, 4, 8)  # full: (16, 64, 256)"),
        ("DIM=393216 # small: 96", "DIM = 96  # full: 393216"),
    ],
)
def test_small_handles_tuples_annotations_and_spacing(line: str, expected: str) -> None:
    assert apply_small_sizes(line + "\n") == expected + "\n"


def test_small_leaves_unmarked_lines_and_line_endings_alone() -> None:
    source = "A = 1\r\nB = 2  # small: 1\r\n    C = 3  # a comment\r\nD = 'text'"
    expected = "A = 1\r\nB = 1  # full: 2\r\n    C = 3  # a comment\r\nD = 'text'"
    assert apply_small_sizes(source) == expected


def test_small_values_are_what_the_module_then_computes_with(tmp_path: Path) -> None:
    source = "ROWS = 65536  # small: 64\nCOLS = 16384  # small: 8\nSIZE = ROWS * COLS\n"
    module = runpy.run_path(str(write(tmp_path / "sizes.py", apply_small_sizes(source))))
    assert (module["ROWS"], module["COLS"], module["SIZE"]) == (64, 8, 512)


def test_small_is_idempotent() -> None:
    once = apply_small_sizes(PROBLEM)
    assert "N = 4  # full: 65536" in once
    assert apply_small_sizes(once) == once


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def f():\n    N = 1024  # small: 4\n", "line 2: '# small:' marks only module-level"),
        ("x = torch.randn(1024)  # small: torch.randn(4)\nprint(x)  # small: 1\n", "line 2"),
        ("N = 1024  # small: 4 +\n", "not a Python expression"),
        ("N += 1024  # small: 4\n", "module-level"),
    ],
)
def test_small_refuses_markers_it_cannot_apply(source: str, message: str) -> None:
    with pytest.raises(LayoutError, match=re.escape(message)):
        apply_small_sizes(source)


# ---- verdicts and fast_p -------------------------------------------------------------------------


def run(problem: str, verdict: Verdict, speedup: float | None = None, **extra: Any) -> RunResult:
    return RunResult(problem=problem, solution=extra.pop("solution", "s"),
                     kernel_type=KernelType.TORCH, verdict=verdict, speedup=speedup, **extra)


RESULTS = [
    run("a", Verdict.CORRECT, 2.5),
    run("b", Verdict.CORRECT, 1.2),
    run("c", Verdict.CORRECT, 0.8),
    run("d", Verdict.CORRECT, None),  # correct, but the server gave no speedup
    run("e", Verdict.INCORRECT),
    run("f", Verdict.COMPILE_ERROR),
    run("g", Verdict.ERROR),  # no verdict: counts against, like any failure
    run("h", Verdict.SKIPPED),  # not sent: left out of the denominator
]


def test_fast_p_counts_correct_runs_faster_than_p_over_the_runs_sent() -> None:
    assert fast_p(RESULTS) == {
        "fast_0": pytest.approx(4 / 7),
        "fast_1": pytest.approx(2 / 7),
        "fast_1.5": pytest.approx(1 / 7),
        "fast_2": pytest.approx(1 / 7),
    }


def test_fast_p_needs_a_speedup_strictly_above_p() -> None:
    results = [run("a", Verdict.CORRECT, 1.0), run("b", Verdict.CORRECT, 2.0),
               run("c", Verdict.CORRECT, 2.0001)]
    assert fast_p(results, thresholds=(1.0, 2.0)) == {
        "fast_1": pytest.approx(2 / 3), "fast_2": pytest.approx(1 / 3)
    }


def test_an_incorrect_run_never_counts_however_fast() -> None:
    assert fast_p([run("a", Verdict.INCORRECT, 50.0), run("b", Verdict.CORRECT, 0.5)]) == {
        "fast_0": 0.5, "fast_1": 0.0, "fast_1.5": 0.0, "fast_2": 0.0
    }


def test_fast_p_of_nothing_sent_is_zero() -> None:
    assert fast_p([run("a", Verdict.SKIPPED)]) == dict.fromkeys(
        ["fast_0", "fast_1", "fast_1.5", "fast_2"], 0.0
    )
    assert fast_p_by_problem([]) == dict.fromkeys(["fast_0", "fast_1", "fast_1.5", "fast_2"], 0.0)


def test_fast_p_by_problem_takes_each_problems_best_run() -> None:
    results = [
        run("p1", Verdict.INCORRECT, solution="wrong"),
        run("p1", Verdict.CORRECT, 0.9, solution="slow"),
        run("p2", Verdict.CORRECT, 3.0, solution="fast"),
        run("p2", Verdict.CORRECT, 1.1, solution="meh"),
        run("p3", Verdict.SKIPPED, solution="gpu_only"),  # p3 had nothing sent: not counted
    ]
    assert fast_p_by_problem(results) == {
        "fast_0": 1.0, "fast_1": 0.5, "fast_1.5": 0.5, "fast_2": 0.5
    }
    assert fast_p(results)["fast_0"] == pytest.approx(3 / 4)


def test_met_expectation_compares_the_verdict_with_the_declaration() -> None:
    assert run("a", Verdict.INCORRECT, expected=Verdict.INCORRECT).met_expectation is True
    assert run("a", Verdict.COMPILE_ERROR, expected=Verdict.INCORRECT).met_expectation is False
    assert run("a", Verdict.CORRECT, expected=Verdict.INCORRECT).met_expectation is False
    assert run("a", Verdict.SKIPPED, expected=Verdict.CORRECT).met_expectation is None
    assert run("a", Verdict.RUNTIME_ERROR).met_expectation is None


EXEC_OK = {"outcome": "success", "compiled": True, "correctness": True, "runtime": 1.0}


@pytest.mark.parametrize(
    ("body", "verdict", "message"),
    [
        ({"kernel_exec_result": EXEC_OK, "ref_exec_result": EXEC_OK}, Verdict.CORRECT, None),
        ({"kernel_exec_result": {"outcome": "incorrect", "compiled": True, "correctness": False,
                                 "validation_error": "3 of 64 elements differ"}},
         Verdict.INCORRECT, "3 of 64 elements differ"),
        ({"kernel_exec_result": {"outcome": "compile_error", "compilation_error": "SyntaxError"}},
         Verdict.COMPILE_ERROR, "SyntaxError"),
        ({"kernel_exec_result": {"outcome": "runtime_error", "compiled": True,
                                 "runtime_error": "CUDA error: illegal address"}},
         Verdict.RUNTIME_ERROR, "CUDA error: illegal address"),
        ({"status": "error", "error": "the reference kernel failed to run",
          "kernel_exec_result": {"outcome": "not_run"},
          "ref_exec_result": {"outcome": "runtime_error", "runtime_error": "ZeroDivisionError"}},
         Verdict.REFERENCE_FAILED, "ZeroDivisionError"),
        ({"status": "error", "error": "worker lost"}, Verdict.ERROR, "worker lost"),
    ],
)
def test_verdict_of_reads_the_outcome_and_the_message_that_explains_it(
    body: dict[str, Any], verdict: Verdict, message: str | None
) -> None:
    response = CompareResponse.model_validate({"job_id": "j", "status": "success", **body})
    assert verdict_of(response) == (verdict, message)


CPU = HealthResponse(status="healthy", gpu_available=False, gpu_count=0, device="cpu",
                     kernel_types=[KernelType.TORCH, KernelType.TRITON])


def test_skip_reason_names_gpu_only_solutions_and_missing_kernel_types(tmp_path: Path) -> None:
    make_suite(tmp_path, {"p": {
        "cupy": "# kernel-eval: requires=gpu\n", "cuda": "# kernel-eval: kernel_type=torch_cuda\n",
        "eager": GOOD,
    }})
    solutions = {s.name: s for s in discover(tmp_path)[0].solutions}
    assert "needs a GPU" in (skip_reason(solutions["cupy"], KernelType.TORCH, CPU) or "")
    assert "torch_cuda is not available" in (
        skip_reason(solutions["cuda"], KernelType.TORCH_CUDA, CPU) or ""
    )
    assert skip_reason(solutions["eager"], KernelType.TORCH, CPU) is None
    gpu = CPU.model_copy(update={"device": "cuda", "gpu_available": True, "kernel_types": []})
    assert skip_reason(solutions["cupy"], KernelType.TORCH, gpu) is None


def report_of(results: list[RunResult]) -> SuiteReport:
    return build_report(results, "http://kernels.test", CPU, SuiteOptions(concurrency=2), 12.0)


def test_the_report_lists_unmet_expectations_and_runs_without_verdict() -> None:
    report = report_of([
        run("a", Verdict.CORRECT, 1.5, expected=Verdict.CORRECT),
        run("b", Verdict.COMPILE_ERROR, expected=Verdict.INCORRECT, solution="wrong"),
        run("c", Verdict.ERROR, http_status=500),
        run("d", Verdict.SKIPPED, expected=Verdict.CORRECT),
    ])
    assert report.unmet_expectations == ["b/wrong"]
    assert report.no_verdict == ["c/s"]
    assert (report.runs, report.problems) == (3, 3)
    assert report.fast_p["fast_1"] == pytest.approx(1 / 3)
    dumped = json.loads(report.model_dump_json())
    assert dumped["results"][1]["met_expectation"] is False


def test_the_table_shows_each_run_the_statistic_and_fast_p() -> None:
    text = format_report(report_of([
        run("08_softmax", Verdict.CORRECT, 2.0, solution="triton_kernel", ref_ms=4.0,
            custom_ms=2.0, speedup_statistic="median", expected=Verdict.CORRECT),
        run("08_softmax", Verdict.INCORRECT, solution="wrong_dim", expected=Verdict.CORRECT,
            message="correctness trial 1 of 5: 8 of 64 elements differ\nmore detail"),
    ]))
    header, first, second = text.splitlines()[:3]
    assert "speedup (median)" in header
    assert re.search(r"triton_kernel\s+torch\s+correct\s+correct ok\s+4\s+2\s+2x", first)
    assert "correct NO" in second and "8 of 64 elements differ" in second
    assert "more detail" not in text
    # speedup 2.0 is above 1 and 1.5 but not above 2; the incorrect run halves every share
    assert re.search(r"over runs\s+0\.500\s+0\.500\s+0\.500\s+0\.000", text)
    assert "not as expected: 08_softmax/wrong_dim" in text


def test_mixed_speedup_statistics_are_named_in_each_cell() -> None:
    text = format_report(report_of([
        run("a", Verdict.CORRECT, 2.0, speedup_statistic="median"),
        run("b", Verdict.CORRECT, 3.0, speedup_statistic="mean"),
    ]))
    assert "2x (median)" in text and "3x (mean)" in text



FRAMES = '  File "kernel_custom.py", line 7, in forward\n    return launch(x)\n'


@pytest.mark.parametrize(
    ("message", "line"),
    [
        ("Traceback (most recent call last):\n" + FRAMES
         + "RuntimeError: CUDA error: an illegal memory access was encountered\n"
         + "CUDA kernel errors might be asynchronously reported at some other API call.",
         "RuntimeError: CUDA error: an illegal memory access was encountered"),
        ("timing: Traceback (most recent call last):\n" + FRAMES + "ValueError: bad shape",
         "timing: ValueError: bad shape"),
        ("Traceback (most recent call last):\n" + FRAMES + "KeyError: 'x'\n\nDuring handling "
         "of the above exception, another exception occurred:\n\n"
         "Traceback (most recent call last):\n" + FRAMES + "TypeError: not a tensor",
         "TypeError: not a tensor"),
        (('  File "kernel_custom.py", line 3\n    def forward(self x):\n              ^\n'
          "SyntaxError: invalid syntax"), "SyntaxError: invalid syntax"),
        ('kernel.cu(3): error: expected a ";"\n  int x\n       ^',
         'kernel.cu(3): error: expected a ";"'),
        ("correctness trial 1 of 5: 8 of 64 elements differ\nmax abs diff 0.5",
         "correctness trial 1 of 5: 8 of 64 elements differ"),
    ],
    ids=["exception-line", "prefixed", "chained", "syntax-error", "compiler", "plain"],
)
def test_error_line_is_the_line_that_says_what_went_wrong(message: str, line: str) -> None:
    assert error_line(message) == line


def test_the_table_notes_a_tracebacks_exception_line() -> None:
    message = ("Traceback (most recent call last):\n" + FRAMES
               + "RuntimeError: CUDA error: an illegal memory access\nCUDA kernel errors might be")
    text = format_report(report_of([run("a", Verdict.RUNTIME_ERROR, message=message)]))

    assert "RuntimeError: CUDA error: an illegal memory access" in text.splitlines()[1]
    assert "CUDA kernel errors" not in text


# ---- the command, against a fake server ----------------------------------------------------------


class FakeSuiteServer:
    """Answers /compare by the custom source: 'return x\\n' is wrong, anything else correct."""

    def __init__(self, compare_status: int = 200) -> None:
        self.compare_status = compare_status
        self.compares: list[dict[str, Any]] = []
        self.ref_runtime = timing(mean=1.6, median=1.6)
        self.custom_runtime: dict[str, Any] | None = None  # a correct solution's runtime_stats

    def handler(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/health":
            return httpx.Response(200, json={
                "status": "healthy", "gpu_available": False, "gpu_count": 0, "device": "cpu",
                "kernel_types": ["torch", "torch_cuda", "triton"],
            })
        if path == "/stats":
            return httpx.Response(200, json={
                "jobs_completed": 0, "jobs_failed": 0, "jobs_timed_out": 0, "jobs_queued": 0,
                "jobs_running": 0, "avg_runtime_ms": 0.0, "gpu_utilization_pct": 0.0,
                "uptime_seconds": 1.0, "device": "cpu", "gpu_count": 0, "worker_slots": 3,
            })
        if path.startswith("/job/"):
            return httpx.Response(200, json={
                "job_id": path.rsplit("/", 1)[1], "kind": "compare", "state": "completed",
                "created_at": 100.0, "started_at": 101.0, "finished_at": 103.5,
            })
        assert path == "/compare", path
        body = json.loads(request.content)
        self.compares.append(body)
        if self.compare_status != 200:
            return httpx.Response(self.compare_status, json={"detail": "boom"})
        job = f"job{len(self.compares)}"
        if "return x\n" in body["custom_kernel"]["source_code"]:
            custom = {"outcome": "incorrect", "compiled": True, "correctness": False,
                      "validation_error": "64 of 64 elements differ"}
        else:
            custom = {**EXEC_OK, "runtime_stats": self.custom_runtime, "metadata": {
                "speedup": 1.6, "speedup_statistic": "median",
                "resources": {"peak_memory_bytes": 10, "input_bytes": 4, "output_bytes": 4},
            }}
        return httpx.Response(200, json={
            "job_id": job, "status": "success", "kernel_exec_result": custom,
            "ref_exec_result": {**EXEC_OK, "runtime": 1.6},
            "ref_runtime": self.ref_runtime,
        })


def timing(mean: float, median: float) -> dict[str, float]:
    """runtime_stats whose mean and median differ, as a skewed kernel's do."""
    return {"mean": mean, "std": 0.0, "min": median, "max": 2 * mean, "median": median,
            "percentile_95": mean, "percentile_99": mean}


def suite_cli(server: FakeSuiteServer, *argv: str) -> int:
    return cli.main(["suite", *argv, "--server", "http://kernels.test"],
                    transport=httpx.MockTransport(server.handler))


@pytest.fixture
def suite_dir(tmp_path: Path) -> Path:
    return make_suite(tmp_path / "suite", {
        "p1": {"good": GOOD, "wrong": BAD},
        "p2": {"good": GOOD, "cupy": "# kernel-eval: requires=gpu\n" + GOOD},
    })


def test_suite_command_runs_every_solution_and_writes_the_report(
    suite_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = FakeSuiteServer()
    out = tmp_path / "report.json"

    code = suite_cli(server, str(suite_dir), "--small", "--num-trials", "7",
                     "--num-correct-trials", "2", "--output", str(out))

    assert code == 0  # every run went as declared; the GPU-only one was skipped
    assert len(server.compares) == 3
    sent = server.compares[0]
    assert sent["num_trials"] == 7 and sent["num_correct_trials"] == 2
    assert sent["ref_kernel"]["kernel_type"] == "torch"
    assert sent["custom_kernel"]["kernel_type"] == "torch"
    assert "N = 4  # full: 65536" in sent["ref_kernel"]["source_code"]  # --small applied
    report = SuiteReport.model_validate_json(out.read_text())
    assert report.concurrency == 3  # the server's worker slots
    verdicts = {f"{r.problem}/{r.solution}": r.verdict for r in report.results}
    assert verdicts == {"p1/good": Verdict.CORRECT, "p1/wrong": Verdict.INCORRECT,
                        "p2/cupy": Verdict.SKIPPED, "p2/good": Verdict.CORRECT}
    good = report.results[0]
    assert (good.speedup, good.speedup_statistic, good.job_seconds) == (1.6, "median", 2.5)
    assert good.kernel_resources == {"peak_memory_bytes": 10, "input_bytes": 4, "output_bytes": 4}
    assert report.fast_p == {"fast_0": pytest.approx(2 / 3), "fast_1": pytest.approx(2 / 3),
                             "fast_1.5": pytest.approx(2 / 3), "fast_2": 0.0}
    captured = capsys.readouterr()
    assert "speedup (median)" in captured.out and "fast_1.5" in captured.out
    assert re.search(r"\[\d/4\] p1/wrong  incorrect", captured.err)  # progress, one per run


def test_the_table_gives_medians_the_figures_the_speedup_is_a_ratio_of(
    suite_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = FakeSuiteServer()  # its speedup is 1.6: 8.0 / 5.0, the medians (the means: 2.75)
    server.ref_runtime = timing(mean=11.0, median=8.0)
    server.custom_runtime = timing(mean=4.0, median=5.0)
    out = tmp_path / "report.json"

    assert suite_cli(server, str(suite_dir), "--filter", "p1/good", "--output", str(out)) == 0

    (good,) = SuiteReport.model_validate_json(out.read_text()).results
    assert (good.ref_ms, good.custom_ms, good.speedup) == (8.0, 5.0, 1.6)
    header, row = capsys.readouterr().out.splitlines()[:2]
    assert re.search(r"ref median ms\s+custom median ms\s+speedup \(median\)", header), header
    assert re.search(r"correct ok\s+8\s+5\s+1\.6x", row), row


def test_suite_command_exits_1_when_a_run_is_not_as_declared(suite_dir: Path) -> None:
    write(suite_dir / "p1" / "solutions" / "good.py", GOOD.replace("x + x", "x"))
    assert suite_cli(FakeSuiteServer(), str(suite_dir)) == 1


def test_suite_command_exits_3_when_the_server_fails_and_records_the_status(
    suite_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report.json"
    assert suite_cli(FakeSuiteServer(compare_status=500), str(suite_dir), "--output", str(out)) == 3
    report = SuiteReport.model_validate_json(out.read_text())
    errors = [r for r in report.results if r.verdict is Verdict.ERROR]
    assert len(errors) == 3 and {r.http_status for r in errors} == {500}


def test_suite_command_filter_concurrency_and_kernel_type(suite_dir: Path, tmp_path: Path) -> None:
    server = FakeSuiteServer()
    out = tmp_path / "r.json"
    code = suite_cli(server, str(suite_dir), "--filter", "p1/good", "--concurrency", "1",
                     "--kernel-type", "torch_cuda", "--output", str(out))
    assert code == 0
    assert [b["custom_kernel"]["kernel_type"] for b in server.compares] == ["torch_cuda"]
    assert SuiteReport.model_validate_json(out.read_text()).concurrency == 1


def test_suite_command_reports_a_bad_layout_as_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "p" / "solutions" / "s.py", GOOD)
    assert suite_cli(FakeSuiteServer(), str(tmp_path)) == 2
    assert "has no problem.py" in capsys.readouterr().err


def test_a_bad_small_marker_is_a_usage_error_before_anything_is_sent(
    suite_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marked = PROBLEM.replace("return [torch.randn(N)]", "return [torch.randn(N)]  # small: []")
    write(suite_dir / "p2" / "problem.py", marked)
    server = FakeSuiteServer()
    assert suite_cli(server, str(suite_dir), "--small") == 2
    assert server.compares == []
    assert "p2/problem.py: line 13: '# small:' marks only module-level" in capsys.readouterr().err
    assert suite_cli(server, str(suite_dir)) == 0  # full sizes never read the markers


def test_suite_help_documents_the_layout(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["suite", "--help"])
    text = capsys.readouterr().out
    for needle in ("DIR/<problem>/problem.py", "solutions/<name>.py", "# kernel-eval:",
                   "# small: 64", "fast_p", "--small", "--filter", "--output"):
        assert needle in text
