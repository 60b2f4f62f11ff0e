"""``kernel-eval suite``: run a directory of KernelBench problems and their solutions.

:data:`LAYOUT_HELP` (also ``kernel-eval suite --help``) documents the directory layout, the
``# kernel-eval:`` declarations and the ``# small:`` size markers. The pure parts are tested
alone: :func:`discover` and :func:`select` read the layout and :func:`apply_small_sizes`
rewrites sizes for ``--small`` (those live in :mod:`kernel_eval_client.suite_layout` and are
importable from here); :func:`verdict_of`, :func:`fast_p` and :func:`format_report` turn
answers into the report; :func:`run_suite` sends the jobs, as many at once as asked.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, computed_field

from .client import KernelEvalClient
from .exceptions import JobTimeoutError, KernelEvalError
from .models import CompareResponse, HealthResponse, KernelCode, KernelType, Outcome
from .result_metadata import ResultMetadata

# The layout's part; the names not used here are imported all the same, so that they stay
# importable from here.
from .suite_layout import (  # noqa: F401
    DIRECTIVE,
    EXPECTABLE,
    LAYOUT_HELP,
    PROBLEM_FILE,
    PROBLEM_KEYS,
    SOLUTION_KEYS,
    SOLUTIONS_DIR,
    LayoutError,
    Problem,
    Solution,
    Verdict,
    apply_small_sizes,
    discover,
    parse_directives,
    select,
)

__all__ = [
    "FAST_P_THRESHOLDS",
    "LAYOUT_HELP",
    "LayoutError",
    "Problem",
    "RunResult",
    "Solution",
    "SuiteOptions",
    "SuiteReport",
    "Verdict",
    "apply_small_sizes",
    "build_report",
    "discover",
    "error_line",
    "fast_p",
    "fast_p_by_problem",
    "format_progress",
    "format_report",
    "parse_directives",
    "run_suite",
    "select",
    "skip_reason",
    "verdict_of",
]

FAST_P_THRESHOLDS = (0.0, 1.0, 1.5, 2.0)
MESSAGE_CHARS = 2000


# ---- results -------------------------------------------------------------------------------------


class RunResult(BaseModel):
    """One solution's comparison with its problem, as the suite reports it."""

    problem: str
    solution: str
    kernel_type: KernelType
    verdict: Verdict
    expected: Verdict | None = None
    message: str | None = None  # why it failed, or why it was skipped
    speedup: float | None = None  # the server's metadata["speedup"]
    speedup_statistic: str | None = None  # e.g. "mean" or "median", when the server says
    # Median milliseconds of the reference and the solution: the statistic whose ratio the
    # server's speedup is (a mean beside it would not divide to the speedup shown).
    ref_ms: float | None = None
    custom_ms: float | None = None
    wall_seconds: float = 0.0  # from sending the request to the answer, queueing included
    job_seconds: float | None = None  # the job's own run time on the server
    job_id: str | None = None
    http_status: int | None = None  # for answers without a verdict (408, 5xx, ...)
    ref_resources: dict[str, Any] | None = None  # the server's metadata["resources"]
    kernel_resources: dict[str, Any] | None = None
    # metadata["provenance"]: False where a kernel type that promises its own kernels ran
    # none of them; None where the server did not see (CPU mode, no trace)
    own_kernels_ran: bool | None = None
    sol_score: float | None = None  # metadata["speed_of_light"]["score"]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def met_expectation(self) -> bool | None:
        """None without an expectation (or when skipped), else whether the verdict matches."""
        if self.expected is None or self.verdict is Verdict.SKIPPED:
            return None
        return self.verdict is self.expected


class SuiteReport(BaseModel):
    """What ``kernel-eval suite --output`` writes."""

    server: str
    device: str
    gpus: list[str] = Field(default_factory=list)
    concurrency: int
    small: bool
    num_trials: int
    num_correct_trials: int
    wall_seconds: float
    results: list[RunResult]
    fast_p: dict[str, float]  # over the runs (solutions) that were sent
    fast_p_by_problem: dict[str, float]  # over problems, each by its best solution
    # fast_p counting only runs whose own kernels ran (a run known to have run none fails)
    fast_p_own: dict[str, float] = Field(default_factory=dict)
    runs: int  # runs sent (skipped ones excluded): fast_p's denominator
    problems: int  # problems with a run sent: fast_p_by_problem's denominator
    unmet_expectations: list[str]
    no_verdict: list[str]


def verdict_of(response: CompareResponse) -> tuple[Verdict, str | None]:
    """The verdict of one /compare answer, and the message that explains a failure."""
    ref = response.ref_exec_result
    if ref is not None and ref.outcome is not Outcome.SUCCESS:
        why = ref.compilation_error or ref.runtime_error or response.error
        return Verdict.REFERENCE_FAILED, _clip(why)
    result = response.kernel_exec_result
    if result is None:
        return Verdict.ERROR, _clip(response.error or "the server returned no result")
    if result.outcome is Outcome.SUCCESS:
        if result.correctness is False:
            return Verdict.INCORRECT, _clip(result.validation_error)
        return Verdict.CORRECT, None
    verdicts = {
        Outcome.INCORRECT: Verdict.INCORRECT,
        Outcome.COMPILE_ERROR: Verdict.COMPILE_ERROR,
        Outcome.RUNTIME_ERROR: Verdict.RUNTIME_ERROR,
        Outcome.TIMEOUT: Verdict.TIMEOUT,
    }
    verdict = verdicts.get(result.outcome, Verdict.ERROR)
    why = (
        result.validation_error or result.compilation_error or result.runtime_error
        or response.error
    )
    return verdict, _clip(why)


def _clip(text: str | None) -> str | None:
    if text is None:
        return None
    text = text.strip()
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS] + " ..."


def fast_p(
    results: Iterable[RunResult], thresholds: Sequence[float] = FAST_P_THRESHOLDS,
    own_only: bool = False,
) -> dict[str, float]:
    """KernelBench's fast_p over runs: the share that are correct with speedup > p.

    ``fast_0`` is the share of correct runs. Skipped runs are left out of the denominator;
    runs without a verdict count as failures. A correct run without a speedup counts
    only for ``fast_0``. Keys are ``fast_0``, ``fast_1``, ``fast_1.5``, ... (``f"fast_{p:g}"``).
    ``own_only``: a run the server saw run none of its own kernels counts as a failure.
    """
    sent = [r for r in results if r.verdict is not Verdict.SKIPPED]
    return {
        _fast_key(p): (sum(_is_fast(r, p) and not (own_only and r.own_kernels_ran is False)
                           for r in sent) / len(sent) if sent else 0.0)
        for p in thresholds
    }


def fast_p_by_problem(
    results: Iterable[RunResult], thresholds: Sequence[float] = FAST_P_THRESHOLDS
) -> dict[str, float]:
    """fast_p over problems: a problem counts when its best solution is correct with speedup > p.

    With one solution per problem (KernelBench's runs) this equals :func:`fast_p`.
    """
    by_problem: dict[str, list[RunResult]] = {}
    for r in results:
        if r.verdict is not Verdict.SKIPPED:
            by_problem.setdefault(r.problem, []).append(r)
    n = len(by_problem)
    return {
        _fast_key(p): (
            sum(any(_is_fast(r, p) for r in runs) for runs in by_problem.values()) / n
            if n else 0.0
        )
        for p in thresholds
    }


def _fast_key(p: float) -> str:
    return f"fast_{p:g}"


def _is_fast(result: RunResult, p: float) -> bool:
    if result.verdict is not Verdict.CORRECT:
        return False
    if p <= 0:
        return True
    return result.speedup is not None and result.speedup > p


# ---- running -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SuiteOptions:
    num_trials: int = 100
    num_correct_trials: int = 5
    timeout: int = 120
    default_kernel_type: KernelType = KernelType.TORCH
    small: bool = False
    concurrency: int = 1


def skip_reason(solution: Solution, kernel_type: KernelType, health: HealthResponse) -> str | None:
    """Why this server cannot run ``solution``, or None if it can."""
    if solution.requires_gpu and health.device != "cuda":
        return "needs a GPU (requires=gpu) and the server runs in CPU mode"
    if health.kernel_types and kernel_type not in health.kernel_types:
        return f"kernel_type {kernel_type.value} is not available on this server"
    return None


def run_suite(
    client: KernelEvalClient,
    problems: Sequence[Problem],
    solutions: Sequence[Solution],
    options: SuiteOptions,
    health: HealthResponse,
    on_result: Callable[[int, int, RunResult], None] | None = None,
) -> SuiteReport:
    """Compare every solution with its problem, ``options.concurrency`` jobs at a time.

    Raises :class:`LayoutError` before sending anything if ``options.small`` is set and a
    ``# small:`` marker cannot be applied.
    """
    by_name = {p.name: p for p in problems}
    started = time.monotonic()
    results: list[RunResult] = []
    to_send: list[tuple[Problem, Solution, KernelType]] = []
    for solution in solutions:
        kernel_type = solution.kernel_type or options.default_kernel_type
        reason = skip_reason(solution, kernel_type, health)
        if reason is None:
            to_send.append((by_name[solution.problem], solution, kernel_type))
        else:
            results.append(RunResult(
                problem=solution.problem, solution=solution.name, kernel_type=kernel_type,
                verdict=Verdict.SKIPPED, expected=solution.expected, message=reason,
            ))
    if options.small:
        for problem, solution, _ in to_send:
            _check_small(problem.path / PROBLEM_FILE, problem.source)
            _check_small(solution.path, solution.source)
    total = len(solutions)
    done = len(results)
    if on_result is not None:
        for i, skipped in enumerate(results, 1):
            on_result(i, total, skipped)
    with ThreadPoolExecutor(max_workers=max(1, options.concurrency)) as pool:
        futures = [
            pool.submit(_run_one, client, problem, solution, kernel_type, options)
            for problem, solution, kernel_type in to_send
        ]
        for future in as_completed(futures):
            result = future.result()
            results.append(result)
            done += 1
            if on_result is not None:
                on_result(done, total, result)
    results.sort(key=lambda r: (r.problem, r.solution))
    return build_report(results, client.base_url, health, options, time.monotonic() - started)


def build_report(
    results: list[RunResult],
    server: str,
    health: HealthResponse,
    options: SuiteOptions,
    wall_seconds: float,
) -> SuiteReport:
    sent = [r for r in results if r.verdict is not Verdict.SKIPPED]
    return SuiteReport(
        server=server,
        device=health.device,
        gpus=[g.name for g in health.gpus],
        concurrency=options.concurrency,
        small=options.small,
        num_trials=options.num_trials,
        num_correct_trials=options.num_correct_trials,
        wall_seconds=round(wall_seconds, 3),
        results=results,
        fast_p=fast_p(results),
        fast_p_by_problem=fast_p_by_problem(results),
        fast_p_own=fast_p(results, own_only=True),
        runs=len(sent),
        problems=len({r.problem for r in sent}),
        unmet_expectations=[
            f"{r.problem}/{r.solution}" for r in results if r.met_expectation is False
        ],
        no_verdict=[f"{r.problem}/{r.solution}" for r in results if r.verdict is Verdict.ERROR],
    )


def _check_small(path: Path, source: str) -> None:
    try:
        apply_small_sizes(source)
    except LayoutError as exc:
        raise LayoutError(f"{path}: {exc}") from None


def _run_one(
    client: KernelEvalClient,
    problem: Problem,
    solution: Solution,
    kernel_type: KernelType,
    options: SuiteOptions,
) -> RunResult:
    prepare = apply_small_sizes if options.small else (lambda s: s)
    result = RunResult(
        problem=problem.name, solution=solution.name, kernel_type=kernel_type,
        verdict=Verdict.ERROR, expected=solution.expected,
    )
    started = time.monotonic()
    try:
        ref = KernelCode(source_code=prepare(problem.source), kernel_type=KernelType.TORCH)
        custom = KernelCode(source_code=prepare(solution.source), kernel_type=kernel_type)
    except ValidationError as exc:  # e.g. a source over the size limit: the request's fault
        result.message = f"cannot send this solution: {exc}"
        return result
    try:
        response = client.compare(
            ref, custom,
            num_trials=options.num_trials,
            num_correct_trials=options.num_correct_trials,
            atol=problem.atol,
            rtol=problem.rtol,
            timeout=options.timeout,
        )
    except JobTimeoutError as exc:
        result.verdict, result.message, result.http_status = Verdict.TIMEOUT, str(exc), 408
        result.job_id = exc.job_id
        result.wall_seconds = round(time.monotonic() - started, 3)
        return result
    except KernelEvalError as exc:
        result.message, result.http_status = str(exc), exc.status_code
        result.wall_seconds = round(time.monotonic() - started, 3)
        return result
    result.wall_seconds = round(time.monotonic() - started, 3)
    result.job_id = response.job_id
    result.verdict, result.message = verdict_of(response)
    custom_result = response.kernel_exec_result
    if custom_result is not None:
        speedup = custom_result.metadata.get("speedup")
        result.speedup = float(speedup) if isinstance(speedup, (int, float)) else None
        statistic = custom_result.metadata.get("speedup_statistic")
        result.speedup_statistic = str(statistic) if statistic is not None else None
        stats = custom_result.runtime_stats
        result.custom_ms = stats.median if stats is not None else None
        result.kernel_resources = _resources(custom_result.metadata)
        block = custom_result.metadata.get("provenance")
        if isinstance(block, dict) and block.get("observed") and block.get("promises_own_code"):
            result.own_kernels_ran = not block.get("no_own_kernel_ran")
        light = custom_result.metadata.speed_of_light
        result.sol_score = light.score if light is not None else None
    if response.ref_exec_result is not None:
        result.ref_resources = _resources(response.ref_exec_result.metadata)
    if response.ref_runtime is not None:
        result.ref_ms = response.ref_runtime.median
    result.job_seconds = _job_seconds(client, response.job_id)
    return result


def _resources(metadata: ResultMetadata) -> dict[str, Any] | None:
    value = metadata.get("resources")
    return value if isinstance(value, dict) else None


def _job_seconds(client: KernelEvalClient, job_id: str) -> float | None:
    try:
        status = client.job_status(job_id)
    except KernelEvalError:
        return None
    if status.started_at is None or status.finished_at is None:
        return None
    return round(status.finished_at - status.started_at, 3)


# ---- output --------------------------------------------------------------------------------------


def format_report(report: SuiteReport) -> str:
    """The runs as a table, then fast_p and anything that did not go as expected."""
    statistics = {r.speedup_statistic for r in report.results if r.speedup is not None}
    statistic = statistics.pop() if len(statistics) == 1 else None
    speedup_header = f"speedup ({statistic})" if statistic else "speedup"
    rows: list[tuple[str, ...]] = [(
        "problem", "solution", "type", "verdict", "expected", "ref median ms", "custom median ms",
        speedup_header, "SOL", "job s", "note",
    )]
    for r in report.results:
        speedup = "-"
        if r.speedup is not None:
            speedup = f"{r.speedup:.3g}x"
            if r.speedup_statistic and statistic is None:
                speedup += f" ({r.speedup_statistic})"
        seconds = r.job_seconds if r.job_seconds is not None else r.wall_seconds
        rows.append((
            r.problem,
            r.solution,
            r.kernel_type.value,
            r.verdict.value,
            _expectation(r),
            _ms(r.ref_ms),
            _ms(r.custom_ms),
            speedup,
            f"{r.sol_score:.2f}" if r.sol_score is not None else "-",
            "-" if r.verdict is Verdict.SKIPPED else f"{seconds:.1f}",
            _note(r.message),
        ))
    lines = [_table(rows), ""]
    lines.append(
        f"{report.runs} runs of {report.problems} problems on {report.device}"
        f"{' (' + ', '.join(sorted(set(report.gpus))) + ')' if report.gpus else ''}"
        f"{', small sizes' if report.small else ''}, {report.wall_seconds:.0f} s"
    )
    skipped = sum(r.verdict is Verdict.SKIPPED for r in report.results)
    if skipped:
        lines.append(f"{skipped} skipped (this server cannot run them)")
    lines.append("")
    thresholds = list(report.fast_p)
    lines.append(_table([
        ("", *thresholds),
        ("over runs", *(f"{report.fast_p[k]:.3f}" for k in thresholds)),
        ("over problems (best run)", *(f"{report.fast_p_by_problem[k]:.3f}" for k in thresholds)),
        *([("over runs whose own kernels ran", *(f"{report.fast_p_own[k]:.3f}"
                                                 for k in thresholds))]
          if report.fast_p_own else []),
    ]))
    if report.unmet_expectations:
        lines += ["", "not as expected: " + ", ".join(report.unmet_expectations)]
    if report.no_verdict:
        lines += ["", "no verdict (server error): " + ", ".join(report.no_verdict)]
    return "\n".join(lines)


def format_progress(done: int, total: int, result: RunResult) -> str:
    """One line per finished run, for the progress display."""
    width = len(str(total))
    extra = ""
    if result.speedup is not None:
        extra = f"  {result.speedup:.3g}x"
    if result.verdict is not Verdict.SKIPPED:
        extra += f"  {result.wall_seconds:.1f} s"
    mark = {True: "", False: "  NOT AS EXPECTED", None: ""}[result.met_expectation]
    return (
        f"[{done:>{width}}/{total}] {result.problem}/{result.solution}  "
        f"{result.verdict.value}{extra}{mark}"
    )


def _expectation(result: RunResult) -> str:
    if result.expected is None:
        return "-"
    met = result.met_expectation
    return result.expected.value + ("" if met is None else " ok" if met else " NO")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _note(message: str | None, width: int = 60) -> str:
    if not message:
        return ""
    line = error_line(message)
    return line if len(line) <= width else line[: width - 3] + "..."


_TRACEBACK_HEADER = "Traceback (most recent call last):"


def error_line(message: str) -> str:
    """The line of an error message that says what went wrong, for a one-line listing.

    For a Python traceback that is the exception line after its frames (``RuntimeError:
    CUDA error: ...``; of the last traceback, if several are chained), kept with any text
    the message put before the traceback (``timing: ``); the lines that may follow it (the
    rest of the exception's message, a hint) are left out. For anything else, its first
    line that is not indented (a compiler's ``kernel.cu(3): error: ...``, or the
    ``SyntaxError: ...`` below a syntax error's quoted line).
    """
    lines = [line.rstrip() for line in message.splitlines() if line.strip()]
    if not lines:
        return message.strip()
    prefix = lines[0].partition(_TRACEBACK_HEADER)[0] if _TRACEBACK_HEADER in lines[0] else ""
    exception = None
    in_frames = False
    for line in lines:
        if line.endswith(_TRACEBACK_HEADER):
            in_frames = True
        elif in_frames and not line[0].isspace():
            exception, in_frames = line, False
    if exception is not None:
        return prefix + exception
    return next((line for line in lines if not line[0].isspace()), lines[0].strip())


def _table(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows
    )
