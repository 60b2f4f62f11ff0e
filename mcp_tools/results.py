"""A finished job as an MCP tool result, and a bad argument as an error's text.

Whether a job's result is an error result (``isError``) follows from its state alone, in
:func:`job_error`: a COMPLETED job has a verdict, whatever it says about the kernel (a compile
error, wrong output, a failing reference); a job TIMED_OUT or FAILED has none, and the text
says what to change. Arguments that do not validate are worded by :func:`invalid_arguments`,
as a REST 400 names them: each field's location and message.
"""

from __future__ import annotations

from collections.abc import Iterable

from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from mcp_tools.schemas import BatchResults
from orchestration.job_manager import JobOutcome
from shared.models import (
    MAX_TIMEOUT_S,
    CompareBatchResult,
    CompareResponse,
    EvaluationResponse,
    JobKind,
    JobState,
    KernelExecResult,
    Outcome,
)


def job_error(outcome: JobOutcome, timeout: int) -> str | None:
    """What an agent is told went wrong with a finished job; None when it has a verdict."""
    response = outcome.response
    if outcome.state is JobState.COMPLETED:
        return None
    if outcome.state is JobState.TIMED_OUT:
        return (
            f"Job {response.job_id} timed out after {timeout} s and was killed"
            f"{': ' + response.error if response.error else ''}. Raise `timeout` "
            f"(at most {MAX_TIMEOUT_S}) or make the kernel faster."
        )
    return (
        f"Job {response.job_id} failed in the server ({outcome.state.value}): "
        f"{response.error or 'no detail'}. This is not a verdict on the kernel."
    )


def job_result(outcome: JobOutcome, kind: JobKind, timeout: int) -> CallToolResult:
    """The result of evaluate_kernel, compare_kernels or validate_kernel."""
    response: EvaluationResponse = outcome.response
    if kind != "compare":
        response = EvaluationResponse.model_validate(
            response.model_dump(include=set(EvaluationResponse.model_fields))
        )
    problem = job_error(outcome, timeout)
    if problem is not None:
        return error(problem, response)
    # A completed job with status "error" is still a verdict (e.g. the reference failed).
    return CallToolResult(
        content=[
            TextContent(type="text", text=summary(response)),
            TextContent(type="text", text=as_json(response)),
        ],
        structured_content=response.model_dump(mode="json"),
    )


def batch_result(results: BatchResults, outcomes: dict[int, JobOutcome], timeout: int,
                 problem: str | None = None) -> CallToolResult:
    """The result of compare_batch: a verdict per candidate, in candidate order.

    An error result only with ``problem`` (the tool stopped waiting); a candidate's own
    timeout or server fault is said in its lines, as :func:`job_error` words it.
    """
    counts = ", ".join(f"{n} {verdict}" for verdict, n in results.summary.items() if n)
    lines = [f"{results.count} candidate(s) compared with the reference: {counts or 'none'}"]
    for result in results.results:
        lines.append("")
        lines.append(f"Candidate #{result.index}: "
                     + (job_error(outcomes[result.index], timeout) or summary(result.response)))
    if results.unfinished_job_ids:
        lines += ["", "Unfinished: " + ", ".join(results.unfinished_job_ids)]
    if problem is not None:
        lines = [problem, "", *lines]
    return CallToolResult(
        content=[TextContent(type="text", text="\n".join(lines))],
        structured_content=results.model_dump(mode="json"),
        is_error=problem is not None,
    )


def batch_line(result: CompareBatchResult, done: int, total: int) -> str:
    """A progress message for one finished candidate."""
    return f"{done}/{total} done: candidate #{result.index} {result.verdict}"


def summary(response: EvaluationResponse) -> str:
    """One verdict line, then any error text in full: what an agent reads first."""
    result = response.kernel_exec_result
    lines = [f"Job {response.job_id}: {verdict(result) if result else 'no result'}"]
    if isinstance(response, CompareResponse):
        ref = response.ref_exec_result
        if response.ref_runtime and result is not None and result.runtime > 0:
            speedup = response.ref_runtime.mean / result.runtime
            lines.append(
                f"Reference {response.ref_runtime.mean:.4g} ms, custom {result.runtime:.4g} ms: "
                f"speedup {speedup:.3g}x"
            )
        if ref is not None and ref.outcome is not Outcome.SUCCESS:
            lines.append(f"The REFERENCE kernel failed: {verdict(ref)}")
            if not response.error:  # else the error below already carries its message
                lines += _errors(ref)
    if result is not None:
        lines += _errors(result)
    if response.error:
        lines.append(f"error: {response.error}")
    return "\n".join(lines)


def verdict(result: KernelExecResult) -> str:
    text = {
        Outcome.SUCCESS: "success",
        Outcome.COMPILE_ERROR: "compile_error: the kernel did not compile or load",
        Outcome.RUNTIME_ERROR: "runtime_error: the kernel failed while running",
        Outcome.INCORRECT: "incorrect: outputs do not match the reference",
        Outcome.TIMEOUT: "timeout: the kernel ran past the job's timeout",
        Outcome.NOT_RUN: "not_run: the kernel was not run",
    }[result.outcome]
    stats = result.runtime_stats
    if stats is not None:
        text += (
            f"; runtime mean {stats.mean:.4g} ms, median {stats.median:.4g}, std {stats.std:.3g}, "
            f"n={stats.num_samples} ({stats.device}{', ' + stats.method if stats.method else ''})"
        )
    return text


def _errors(result: KernelExecResult) -> list[str]:
    return [
        f"{label}:\n{text}"
        for label, text in (
            ("compilation_error", result.compilation_error),
            ("validation_error", result.validation_error),
            ("runtime_error", result.runtime_error),
        )
        if text
    ]


class InvalidArguments(ToolError):
    """Arguments that each validate but do not make a request together (a rule across fields)."""

    def __init__(self, invalid: ValidationError) -> None:
        super().__init__(invalid_arguments("the tool", invalid.errors()))
        self.errors = invalid.errors()


def argument_errors(exc: ToolError) -> list[ErrorDetails] | None:
    """What was wrong with the arguments of a call that failed with ``exc``; None if nothing.

    The SDK reports a tool's failure as a ToolError whose ``__cause__`` is what was raised:
    the ValidationError of arguments that do not fit the tool's schema, or the tool's own
    :class:`InvalidArguments`. A crash (UnexpectedToolError) is never the caller's mistake,
    even where a ValidationError caused it.
    """
    cause = None if isinstance(exc, UnexpectedToolError) else exc.__cause__
    if isinstance(cause, ValidationError):
        return cause.errors()
    if isinstance(cause, InvalidArguments):
        return cause.errors
    return None


def invalid_arguments(tool: str, errors: Iterable[ErrorDetails]) -> str:
    """The text of a call whose arguments do not validate: per field, where and what is wrong.

    Only the location and pydantic's message: not the value (it may be a megabyte of source)
    and not pydantic's link to its documentation.
    """
    problems = "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or '(arguments)'}: {error['msg']}"
        for error in errors
    )
    return f"Invalid arguments to {tool}: {problems}. Nothing ran; fix them and call it again."


def as_json(model: BaseModel) -> str:
    return model.model_dump_json(indent=2, exclude_none=True)


def error(message: str, response: EvaluationResponse | None = None) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=message)],
        structured_content=None if response is None else response.model_dump(mode="json"),
        is_error=True,
    )
