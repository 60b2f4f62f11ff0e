"""``kernel-eval``: the command-line client of the Kernel Evaluation Server.

    kernel-eval evaluate kernel.py --io io.json
    kernel-eval compare ref.py custom.cu --io io.json --metadata '{"kernel_name": "k"}'
    kernel-eval compare-batch --ref ref.py --custom a.py --custom b.py   (or --custom DIR)
    kernel-eval validate kernel.py
    kernel-eval health | stats | job JOB_ID
    kernel-eval suite DIR [--small] [--output report.json]

Results print as a table; ``--json`` prints the server's answer as JSON instead. The exit
status tells scripts what happened (see :data:`EXIT_CODES`). On a terminal, a job's state and
how long it has spent in each (queued, running on GPU n) show on a live line while it runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from . import suite as suite_runner
from .client import (
    API_KEY_ENV,
    DEFAULT_SERVER_URL,
    SERVER_URL_ENV,
    KernelEvalClient,
    StatusCallback,
)
from .exceptions import AuthenticationError, InvalidRequestError, KernelEvalError
from .io_contract import IOContract
from .models import (
    ClusterInfo,
    CompareBatchResult,
    CompareBatchSummary,
    CompareResponse,
    EvaluationResponse,
    HealthResponse,
    JobState,
    JobStatusResponse,
    KernelCode,
    KernelExecResult,
    KernelMetadata,
    KernelType,
    Outcome,
    RuntimeStats,
    StatsResponse,
)

__all__ = ["EXIT_CODES", "build_parser", "main"]

EXIT_OK = 0  # the kernel compiled, ran (and matched the reference); or the query succeeded
EXIT_KERNEL_FAILED = 1  # compile error, runtime error, incorrect output, or kernel timeout
EXIT_USAGE = 2  # bad arguments or files, or the server refused the request as invalid
EXIT_SERVER = 3  # server unreachable, no answer in time, job killed at its timeout, server fault
EXIT_CODES = {
    EXIT_OK: "success verdict (or the query succeeded)",
    EXIT_KERNEL_FAILED: "the kernel failed: compile error, runtime error, incorrect output",
    EXIT_USAGE: "usage error: bad arguments or input files, or the server rejected the request",
    EXIT_SERVER: "server unreachable, timed out (client or job timeout), or failed",
}
EXTENSION_TYPES = {".cu": KernelType.CUDA, ".cuh": KernelType.CUDA, ".py": KernelType.TORCH}

_M = TypeVar("_M", bound=BaseModel)


class UsageError(Exception):
    """A problem with the command line or its input files (exit status 2)."""


def main(argv: Sequence[str] | None = None, *, transport: httpx.BaseTransport | None = None) -> int:
    """Run the CLI; returns the exit status. ``transport`` is for tests (httpx.MockTransport)."""
    args = build_parser().parse_args(argv)
    try:
        client = KernelEvalClient(args.server, api_key=args.api_key, transport=transport)
    except ValueError as exc:  # a server URL the client cannot use
        print(f"kernel-eval: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with client:
            code: int = args.run(client, args)
            return code
    except UsageError as exc:
        print(f"kernel-eval: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KernelEvalError as exc:
        print(f"kernel-eval: error: {exc}", file=sys.stderr)
        return _exit_code_for(exc)
    except KeyboardInterrupt:
        print("kernel-eval: interrupted (the job may still run on the server)", file=sys.stderr)
        return 130


def build_parser() -> argparse.ArgumentParser:
    exit_codes = "\n".join(f"  {code}  {text}" for code, text in EXIT_CODES.items())
    epilog = (
        f"exit status:\n{exit_codes}\n\n"
        f"The server URL defaults to ${SERVER_URL_ENV}, else {DEFAULT_SERVER_URL}."
    )
    parser = argparse.ArgumentParser(
        prog="kernel-eval",
        description="Compile, check and time GPU kernels on a Kernel Evaluation Server.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--server",
        default=os.environ.get(SERVER_URL_ENV, DEFAULT_SERVER_URL),
        help=f"server URL (default: ${SERVER_URL_ENV} or {DEFAULT_SERVER_URL})",
    )
    common.add_argument(
        "--api-key", metavar="KEY",
        help=f"the server's API key, if it needs one (default: ${API_KEY_ENV})",
    )
    common.add_argument("--json", action="store_true", help="print the raw JSON answer")
    job = argparse.ArgumentParser(add_help=False)
    job.add_argument("--timeout", type=int, default=120, help="job timeout in seconds (max 600)")
    kinds = [t.value for t in KernelType]
    type_help = "kernel type (default: from the extension: .cu -> cuda, .py -> torch)"

    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(
        name: str, help: str, parents: list[argparse.ArgumentParser]
    ) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            parents=parents,
            help=help,
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    evaluate = command("evaluate", "compile, run and time one kernel", [common, job])
    _kernel_arguments(evaluate, kinds, type_help)
    evaluate.add_argument(
        "--trials", type=int, help="timed samples (default: until the median is precise)"
    )
    evaluate.add_argument("--device-metrics", action="store_true", help="collect NCU metrics")
    evaluate.set_defaults(run=_evaluate)

    compare = command("compare", "check a kernel against a reference, time both", [common, job])
    compare.add_argument("ref", type=Path, help="reference kernel source file")
    compare.add_argument("custom", type=Path, help="custom kernel source file")
    _comparison_arguments(compare, "custom kernel", kinds, type_help)
    compare.set_defaults(run=_compare)

    batch = command(
        "compare-batch",
        "check many kernels against one reference; a line per kernel as it finishes",
        [common, job],
    )
    batch.add_argument("--ref", type=Path, required=True, help="reference kernel source file")
    batch.add_argument(
        "--custom", type=Path, action="append", required=True, metavar="PATH",
        help="a candidate kernel source file, or a directory of them (.py, .cu, .cuh); "
        "repeatable",
    )
    _comparison_arguments(batch, "candidates", kinds, type_help)
    batch.add_argument(
        "--no-reuse-reference", action="store_true",
        help="run the reference afresh instead of reusing an identical earlier run",
    )
    batch.set_defaults(run=_compare_batch)

    validate = command("validate", "check that a kernel compiles and runs once", [common, job])
    _kernel_arguments(validate, kinds, type_help)
    validate.set_defaults(run=_validate)

    suite = sub.add_parser(
        "suite",
        parents=[common, job],
        help="run a directory of KernelBench problems and solutions; print fast_p",
        description=suite_runner.LAYOUT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    suite.add_argument("dir", type=Path, help="the suite directory (layout above)")
    suite.add_argument(
        "--kernel-type", choices=kinds, help="type of solutions that declare none (default torch)"
    )
    suite.add_argument(
        "--num-trials", "--trials", type=int, default=100, metavar="N", help="timed samples (100)"
    )
    suite.add_argument(
        "--num-correct-trials", "--correct-trials", type=int, default=5, metavar="N",
        help="correctness checks, each on fresh inputs (5)",
    )
    suite.add_argument(
        "--concurrency", type=int, metavar="N", help="jobs at once (default: the server's slots)"
    )
    suite.add_argument("--small", action="store_true", help="use the '# small:' sizes")
    suite.add_argument(
        "--filter", action="append", default=[], metavar="GLOB",
        help="only problems (or problem/solution ids, with a /) matching; repeatable",
    )
    suite.add_argument("--output", type=Path, metavar="FILE", help="write the report as JSON")
    suite.set_defaults(run=_suite)

    command("health", "server health", [common]).set_defaults(run=_health)
    command("stats", "server statistics", [common]).set_defaults(run=_stats)
    job_status = command("job", "status and result of a job", [common])
    job_status.add_argument("job_id", metavar="ID")
    job_status.set_defaults(run=_job)
    return parser


def _comparison_arguments(
    parser: argparse.ArgumentParser, custom: str, kinds: list[str], type_help: str
) -> None:
    possessive = f"{custom}'" if custom.endswith("s") else f"{custom}'s"
    parser.add_argument("--type", choices=kinds, help=f"{possessive} {type_help}")
    parser.add_argument("--ref-type", choices=kinds, help="reference " + type_help)
    parser.add_argument("--io", type=Path, help=f"IOContract JSON file of the {custom}")
    parser.add_argument("--ref-io", type=Path, help="IOContract JSON file of the reference")
    parser.add_argument("--metadata", help=f"{custom} metadata: JSON text or @file")
    parser.add_argument("--ref-metadata", help="reference metadata: JSON text or @file")
    parser.add_argument(
        "--trials", type=int, help="timed samples (default: until the median is precise)"
    )
    parser.add_argument(
        "--correct-trials", type=int, default=5, help="correctness checks (default 5)"
    )
    parser.add_argument("--atol", type=float, help="absolute tolerance (default per dtype)")
    parser.add_argument("--rtol", type=float, help="relative tolerance (default per dtype)")
    parser.add_argument("--device-metrics", action="store_true", help="collect NCU metrics")


def _kernel_arguments(parser: argparse.ArgumentParser, kinds: list[str], type_help: str) -> None:
    parser.add_argument("file", type=Path, help="kernel source file")
    parser.add_argument("--type", choices=kinds, help=type_help)
    parser.add_argument("--io", type=Path, help="IOContract JSON file (needed for triton, cuda)")
    parser.add_argument("--metadata", help="kernel metadata: JSON text or @file")


# ---- commands -------------------------------------------------------------------------------------


def _evaluate(client: KernelEvalClient, args: argparse.Namespace) -> int:
    kernel = _load_kernel(args.file, args.type, args.io, args.metadata)
    with _job_progress("evaluating", args) as on_status:
        response = client.evaluate(
            kernel,
            num_trials=args.trials,
            timeout=args.timeout,
            enable_device_metrics=args.device_metrics or None,
            on_status=on_status,
        )
    _print(args, response, format_evaluation)
    return _verdict_code(response)


def _compare(client: KernelEvalClient, args: argparse.Namespace) -> int:
    ref = _load_kernel(args.ref, args.ref_type, args.ref_io, args.ref_metadata)
    custom = _load_kernel(args.custom, args.type, args.io, args.metadata)
    with _job_progress("comparing", args) as on_status:
        response = client.compare(
            ref,
            custom,
            num_trials=args.trials,
            num_correct_trials=args.correct_trials,
            atol=args.atol,
            rtol=args.rtol,
            timeout=args.timeout,
            enable_device_metrics=args.device_metrics or None,
            on_status=on_status,
        )
    _print(args, response, format_comparison)
    return _verdict_code(response)


def _compare_batch(client: KernelEvalClient, args: argparse.Namespace) -> int:
    ref = _load_kernel(args.ref, args.ref_type, args.ref_io, args.ref_metadata)
    paths = candidate_files(args.custom)
    kernels = [_load_kernel(path, args.type, args.io, args.metadata) for path in paths]
    names = [str(path) for path in paths]
    results: list[CompareBatchResult] = []
    for result in client.compare_batch(
        ref,
        kernels,
        num_trials=args.trials,
        num_correct_trials=args.correct_trials,
        atol=args.atol,
        rtol=args.rtol,
        timeout=args.timeout,
        enable_device_metrics=args.device_metrics or None,
        reuse_reference=not args.no_reuse_reference,
    ):
        results.append(result)
        line = result.model_dump_json() if args.json else format_batch_line(
            result, names, len(results))
        print(line, flush=True)
    summary = CompareBatchSummary.of(results)
    print(summary.model_dump_json() if args.json else "\n" + format_batch_table(results, names))
    # The worst answer decides: a job without a verdict (3) over a failing kernel (1).
    return max((_batch_code(result) for result in results), default=EXIT_SERVER)


def _batch_code(result: CompareBatchResult) -> int:
    if result.state is not JobState.COMPLETED or result.response.status == "error":
        return EXIT_SERVER
    return EXIT_OK if result.verdict == Outcome.SUCCESS.value else EXIT_KERNEL_FAILED


def _validate(client: KernelEvalClient, args: argparse.Namespace) -> int:
    kernel = _load_kernel(args.file, args.type, args.io, args.metadata)
    with _job_progress("validating", args) as on_status:
        response = client.validate(kernel, timeout=args.timeout, on_status=on_status)
    _print(args, response, format_evaluation)
    return _verdict_code(response)


def _health(client: KernelEvalClient, args: argparse.Namespace) -> int:
    _print(args, client.health(), format_health)
    return EXIT_OK


def _stats(client: KernelEvalClient, args: argparse.Namespace) -> int:
    _print(args, client.stats(), format_stats)
    return EXIT_OK


def _job(client: KernelEvalClient, args: argparse.Namespace) -> int:
    _print(args, client.job_status(args.job_id), format_job)
    return EXIT_OK


def _suite(client: KernelEvalClient, args: argparse.Namespace) -> int:
    try:
        problems = suite_runner.discover(args.dir)
    except suite_runner.LayoutError as exc:
        raise UsageError(str(exc)) from exc
    solutions = suite_runner.select(problems, args.filter)
    if not solutions:
        raise UsageError(f"no solutions under {args.dir}" + (" match --filter" if args.filter else ""))
    health = client.health()
    concurrency = args.concurrency
    if concurrency is None:
        try:
            concurrency = client.stats().worker_slots
        except KernelEvalError:  # e.g. an MCP-only server has no /stats
            concurrency = health.gpu_count
    options = suite_runner.SuiteOptions(
        num_trials=args.num_trials,
        num_correct_trials=args.num_correct_trials,
        timeout=args.timeout,
        default_kernel_type=KernelType(args.kernel_type or KernelType.TORCH.value),
        small=args.small,
        concurrency=max(1, concurrency),
    )
    print(f"{len(solutions)} solutions, {options.concurrency} at a time", file=sys.stderr)
    try:
        report = suite_runner.run_suite(
            client, problems, solutions, options, health,
            on_result=lambda done, total, result: print(
                suite_runner.format_progress(done, total, result), file=sys.stderr, flush=True
            ),
        )
    except suite_runner.LayoutError as exc:
        raise UsageError(str(exc)) from exc
    if args.output:
        try:
            args.output.write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from exc
    _print(args, report, suite_runner.format_report)
    if report.no_verdict:
        return EXIT_SERVER
    return EXIT_KERNEL_FAILED if report.unmet_expectations else EXIT_OK


def _verdict_code(response: EvaluationResponse) -> int:
    result = response.kernel_exec_result
    if response.status == "error" or result is None:
        print(f"kernel-eval: error: no verdict: {response.error or 'no result'}", file=sys.stderr)
        return EXIT_SERVER
    failed = result.outcome is not Outcome.SUCCESS or result.correctness is False
    if isinstance(response, CompareResponse) and response.ref_exec_result is not None:
        failed = failed or response.ref_exec_result.outcome is not Outcome.SUCCESS
    return EXIT_KERNEL_FAILED if failed else EXIT_OK


def _exit_code_for(exc: KernelEvalError) -> int:
    # Everything but a refused request or key is the server's side: unreachable, slow, failing.
    refused = isinstance(exc, (InvalidRequestError, AuthenticationError))
    return EXIT_USAGE if refused else EXIT_SERVER


# ---- input files ----------------------------------------------------------------------------------


def _load_kernel(
    path: Path, kernel_type: str | None, io_path: Path | None, metadata: str | None
) -> KernelCode:
    source = _read(path)
    kind = KernelType(kernel_type) if kernel_type else infer_kernel_type(path)
    io = _parse(IOContract, _read(io_path), f"IOContract {io_path}") if io_path else None
    meta = _parse(KernelMetadata, _metadata_text(metadata), "--metadata") if metadata else None
    try:
        return KernelCode(source_code=source, kernel_type=kind, io=io, metadata=meta)
    except ValidationError as exc:
        raise UsageError(f"{path}: {_first_error(exc)}") from exc


def candidate_files(paths: Sequence[Path]) -> list[Path]:
    """The files named, a directory standing for its kernel sources (by extension, sorted)."""
    found: list[Path] = []
    for path in paths:
        if not path.is_dir():
            found.append(path)
            continue
        sources = sorted(p for p in path.iterdir()
                         if p.is_file() and p.suffix.lower() in EXTENSION_TYPES)
        if not sources:
            kinds = ", ".join(EXTENSION_TYPES)
            raise UsageError(f"{path} holds no kernel source files ({kinds})")
        found += sources
    return found


def infer_kernel_type(path: Path) -> KernelType:
    """``.cu``/``.cuh`` are cuda, ``.py`` is torch; other kernel types need ``--type``."""
    try:
        return EXTENSION_TYPES[path.suffix.lower()]
    except KeyError:
        raise UsageError(
            f"cannot tell the kernel type of {path} from its extension; pass --type"
        ) from None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _metadata_text(value: str) -> str:
    return _read(Path(value[1:])) if value.startswith("@") else value


def _parse(model: type[_M], text: str, what: str) -> _M:
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        raise UsageError(f"{what} is not valid: {_first_error(exc)}") from exc


def _first_error(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors()
    )


# ---- output ---------------------------------------------------------------------------------------


def _print(args: argparse.Namespace, model: _M, fmt: Callable[[_M], str]) -> None:
    print(model.model_dump_json(indent=2) if args.json else fmt(model))


def format_evaluation(response: EvaluationResponse) -> str:
    """A result of /evaluate or /validate as a table, errors in full below it."""
    lines = [f"job {response.job_id}  status {response.status}"]
    result = response.kernel_exec_result
    if result is not None:
        lines += ["", _table(_result_rows([("kernel", result)]))]
        lines += _error_blocks("", result)
    if response.error:
        lines += ["", f"error: {response.error}"]
    return "\n".join(lines)


def format_comparison(response: CompareResponse) -> str:
    """A result of /compare: reference and custom side by side, the speedup, errors in full."""
    lines = [f"job {response.job_id}  status {response.status}"]
    custom = response.kernel_exec_result
    ref = response.ref_exec_result
    if ref is None and response.ref_runtime is not None:
        ref = KernelExecResult(
            compiled=True, runtime=response.ref_runtime.mean, runtime_stats=response.ref_runtime
        )
    columns = [(name, r) for name, r in (("reference", ref), ("custom", custom)) if r is not None]
    if columns:
        lines += ["", _table(_result_rows(columns))]
    speedup = _speedup(response)
    if speedup is not None:
        verdict = "faster" if speedup > 1 else "slower" if speedup < 1 else "as fast"
        lines.append(f"\nspeedup  {speedup:.3g}x (of the medians; custom is {verdict})")
    for name, result in columns:
        lines += _error_blocks(name + " ", result)
    if response.error:
        lines += ["", f"error: {response.error}"]
    return "\n".join(lines)


def format_batch_line(result: CompareBatchResult, names: Sequence[str], done: int) -> str:
    """One candidate's answer, as it arrives: its verdict, timing, or the line of its error
    that says what went wrong (a traceback's exception line)."""
    response = result.response
    custom = response.kernel_exec_result
    head = f"[{done}/{len(names)}] #{result.index} {names[result.index]}  {result.verdict}"
    if result.state is not JobState.COMPLETED or response.status == "error":
        return f"{head}: {suite_runner.error_line(response.error or result.state.value)}"
    if custom is not None and custom.outcome is not Outcome.SUCCESS:
        problem = custom.compilation_error or custom.validation_error or custom.runtime_error
        return f"{head}: {suite_runner.error_line(problem or custom.outcome.value)}"
    speedup = _speedup(response)
    median = _median(custom)
    timing = f"  median {_ms(median)} ms" if median is not None else ""
    return head + timing + (f"  speedup {speedup:.3g}x" if speedup is not None else "")


def format_batch_table(results: Sequence[CompareBatchResult], names: Sequence[str]) -> str:
    """Every candidate in order (verdict, time, speedup, job), then the counts by verdict."""
    rows: list[tuple[str, ...]] = [
        ("#", "candidate", "verdict", "median ms", "speedup (median)", "job")
    ]
    for result in sorted(results, key=lambda r: r.index):
        median = _median(result.response.kernel_exec_result)
        speedup = _speedup(result.response)
        rows.append((
            str(result.index), names[result.index], result.verdict,
            _ms(median) if median is not None else "-",
            f"{speedup:.3g}x" if speedup is not None else "-", result.job_id,
        ))
    counts = CompareBatchSummary.of(results).summary
    tally = ", ".join(f"{n} {verdict}" for verdict, n in counts.items() if n)
    return f"{_table(rows)}\n\n{len(results)} candidates: {tally}"


def format_health(health: HealthResponse) -> str:
    gpus = ", ".join(f"{g.id}: {g.name}" for g in health.gpus) or "none"
    rows = [
        ("status", health.status),
        ("device", health.device),
        ("gpus", f"{health.gpu_count} ({gpus})"),
        ("kernel types", ", ".join(t.value for t in health.kernel_types) or "-"),
        ("compilation", health.compilation_service),
        ("profiling", health.profiling_service),
        ("device metrics", _yes(health.device_metrics_enabled)),
        ("version", health.version or "-"),
    ]
    if health.cluster is not None:
        rows.append(("cluster", _cluster(health.cluster)))
    return _table(rows)


def format_stats(stats: StatsResponse) -> str:
    rows = [(name.replace("_", " "), _value(value))
            for name, value in stats.model_dump(exclude={"cluster"}).items()]
    if stats.cluster is not None:
        rows.append(("cluster", _cluster(stats.cluster)))
    return _table(rows)


def _cluster(cluster: ClusterInfo) -> str:
    """One line: the Ray cluster's nodes and slots, e.g. '2 nodes, 4 GPU slots (1 busy)'."""
    alive = sum(1 for node in cluster.nodes if node.alive)
    what = "GPU" if cluster.resource == "GPU" else "CPU"
    text = f"{alive} node{'' if alive == 1 else 's'}, {len(cluster.slots)} {what} slots"
    text += f" ({cluster.busy} busy"
    return text + (f", {cluster.lost} lost)" if cluster.lost else ")") + f" at {cluster.address}"


def format_job(status: JobStatusResponse) -> str:
    rows = [
        ("job", status.job_id),
        ("kind", status.kind),
        ("state", status.state.value),
        ("created", _when(status.created_at)),
        ("started", _when(status.started_at)),
        ("finished", _when(status.finished_at)),
        ("gpu", "-" if status.gpu_id is None else str(status.gpu_id)),
    ]
    lines = [_table(rows)]
    if status.error:
        lines.append(f"\nerror: {status.error}")
    if status.result is not None:
        fmt = format_comparison if status.kind == "compare" else format_evaluation
        lines += ["", fmt(status.result)]
    return "\n".join(lines)


def _result_rows(columns: list[tuple[str, KernelExecResult]]) -> list[tuple[str, ...]]:
    def row(label: str, cell: Callable[[KernelExecResult], str]) -> tuple[str, ...]:
        return (label, *(cell(result) for _, result in columns))

    def stat(name: str) -> Callable[[KernelExecResult], str]:
        return lambda r: _ms(getattr(r.runtime_stats, name)) if r.runtime_stats else "-"

    rows = [
        ("", *(name for name, _ in columns)),
        row("compiled", lambda r: _yes(r.compiled)),
        row("correct", lambda r: "-" if r.correctness is None else _yes(r.correctness)),
        row("outcome", lambda r: r.outcome.value),
    ]
    if any(r.runtime_stats for _, r in columns):
        rows += [
            row(f"{label} (ms)", stat(name))
            for label, name in (
                ("mean", "mean"),
                ("median", "median"),
                ("std", "std"),
                ("min", "min"),
                ("max", "max"),
                ("p95", "percentile_95"),
                ("p99", "percentile_99"),
            )
        ]
        rows.append(
            row("samples", lambda r: str(r.runtime_stats.num_samples) if r.runtime_stats else "-")
        )
        rows.append(row("timing", lambda r: _timing(r.runtime_stats)))
    return rows


def _error_blocks(prefix: str, result: KernelExecResult) -> list[str]:
    blocks = []
    for label, text in (
        ("compilation error", result.compilation_error),
        ("validation error", result.validation_error),
        ("runtime error", result.runtime_error),
    ):
        if text:
            blocks += ["", f"{prefix}{label}:", text.rstrip()]
    return blocks


def _speedup(response: CompareResponse) -> float | None:
    """The server's speedup (``metadata.speedup``: the reference's median over the custom
    kernel's), or the same ratio from the answer's timings where a server gives none."""
    custom = response.kernel_exec_result
    if custom is None:
        return None
    given = custom.metadata.get("speedup")
    if isinstance(given, (int, float)) and not isinstance(given, bool):
        return float(given)
    median = _median(custom)
    if response.ref_runtime is None or median is None or median <= 0:
        return None
    return response.ref_runtime.median / median


def _median(result: KernelExecResult | None) -> float | None:
    if result is None or result.runtime_stats is None:
        return None
    return result.runtime_stats.median


def _table(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _ms(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1000 else f"{value:.0f}"


def _timing(stats: RuntimeStats | None) -> str:
    if stats is None:
        return "-"
    return f"{stats.method or '?'} ({stats.device})"


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def _value(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


@contextmanager
def _job_progress(label: str, args: argparse.Namespace) -> Iterator[StatusCallback | None]:
    """While a job runs: its live status line on stderr, and the callback that feeds it (for
    the client's ``on_status``, which polls the job instead of waiting on one request).

    Only for a person at a terminal: with ``--json``, or stdout or stderr not a terminal
    (piped, redirected, captured), nothing is shown and None is given, so the call waits on
    one request as it would without the CLI.
    """
    if args.json or not (sys.stdout.isatty() and sys.stderr.isatty()):
        yield None
        return
    line = _StatusLine(label, sys.stderr)
    with line.shown():
        yield line.update


class _StatusLine:
    """The line ``evaluating  job 3f2a9c1e  queued 0.4s, running on GPU 0 2.1s``: each state
    the job was seen in and for how long, redrawn with every status and ten times a second."""

    REDRAW_S = 0.1

    def __init__(
        self, label: str, out: TextIO, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.label = label
        self.out = out
        self.clock = clock
        self.started = clock()
        self.job_id: str | None = None
        self.states: list[tuple[str, float]] = []  # what the job was seen doing, and since when
        self._lock = threading.Lock()
        self._writing = threading.Lock()

    def update(self, status: JobStatusResponse) -> None:
        """A status read from the server (the client's ``on_status``)."""
        state = status.state.value
        if status.state is JobState.RUNNING and status.gpu_id is not None:
            state += f" on GPU {status.gpu_id}"
        with self._lock:
            self.job_id = status.job_id
            if not self.states or self.states[-1][0] != state:
                self.states.append((state, self.clock()))
        self.draw()

    def text(self) -> str:
        now = self.clock()
        with self._lock:
            if self.job_id is None:
                return f"{self.label}  submitting {now - self.started:.1f}s"
            ends = [since for _, since in self.states[1:]] + [now]
            spent = ", ".join(
                f"{state} {end - since:.1f}s"
                for (state, since), end in zip(self.states, ends, strict=True)
            )
            return f"{self.label}  job {self.job_id[:8]}  {spent}"

    def draw(self) -> None:
        text = self.text()
        width = shutil.get_terminal_size().columns - 1
        if len(text) > width:
            text = text[: max(width - 3, 0)] + "..."
        with self._writing:  # the client's thread and the redrawing thread
            self.out.write(f"\r{text}\033[K")
            self.out.flush()

    @contextmanager
    def shown(self) -> Iterator[None]:
        """Draws the line until the block ends, then clears it."""
        done = threading.Event()

        def redraw() -> None:
            while not done.wait(self.REDRAW_S):
                self.draw()

        self.draw()
        thread = threading.Thread(target=redraw, daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()
            with self._writing:
                self.out.write("\r\033[K")
                self.out.flush()


if __name__ == "__main__":
    sys.exit(main())
