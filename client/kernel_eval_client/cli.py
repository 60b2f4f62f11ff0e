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

This module holds the parser, the commands and the reading of input files; the tables and the
live status line are in :mod:`kernel_eval_client.cli_format`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from . import suite as suite_runner
from .cli_format import (
    _job_progress,
    format_batch_line,
    format_batch_table,
    format_comparison,
    format_evaluation,
    format_health,
    format_job,
    format_stats,
)
from .client import (
    API_KEY_ENV,
    DEFAULT_SERVER_URL,
    SERVER_URL_ENV,
    KernelEvalClient,
)
from .exceptions import AuthenticationError, InvalidRequestError, KernelEvalError
from .io_contract import IOContract
from .models import (
    CompareBatchResult,
    CompareBatchSummary,
    CompareResponse,
    EvaluationResponse,
    JobState,
    KernelCode,
    KernelMetadata,
    KernelType,
    Outcome,
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
    compare.add_argument("--robustness", action="store_true",
                         help="recheck a correct candidate at other scales and distributions")
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
            robustness=args.robustness,
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


if __name__ == "__main__":
    sys.exit(main())
