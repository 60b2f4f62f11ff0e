"""What ``kernel-eval`` prints: the tables of its answers and the live status line of a job.

The ``format_*`` functions turn the server's answers into the CLI's tables (``--json``
aside); :func:`_job_progress` shows a running job's state on a terminal (see
:class:`_StatusLine`). The commands themselves are in :mod:`kernel_eval_client.cli`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TextIO

from .client import StatusCallback
from .models import (
    ClusterInfo,
    CompareBatchResult,
    CompareBatchSummary,
    CompareResponse,
    EvaluationResponse,
    HealthResponse,
    JobState,
    JobStatusResponse,
    KernelExecResult,
    Outcome,
    RuntimeStats,
    StatsResponse,
)
from .suite import error_line


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
    lines += _insight(columns)
    for name, result in columns:
        lines += _error_blocks(name + " ", result)
    if response.error:
        lines += ["", f"error: {response.error}"]
    return "\n".join(lines)


KERNELS_SHOWN = 8  # the kernels of a traced call printed, by device time


def _insight(columns: list[tuple[str, KernelExecResult]]) -> list[str]:
    """Each side's speed of light, the kernels its traced call ran, and the robustness
    cases, where the result has them."""
    lines: list[str] = []
    lights = [(name, r.metadata.speed_of_light) for name, r in columns
              if r.metadata.speed_of_light is not None]
    if lights:
        rows: list[tuple[str, ...]] = [("speed of light", "bound ms", "memory", "compute",
                                        "score")]
        for name, light in lights:
            assert light is not None
            rows.append((f"{name} ({light.speed_of_light})", _num(light.bound_ms),
                         _pct(light.memory_fraction), _pct(light.compute_fraction),
                         _num(light.score)))
        lines += ["", _table(rows)]
    for name, result in columns:
        block = result.metadata.get("provenance")
        if not isinstance(block, dict) or not block.get("observed"):
            continue
        kernels = sorted(block.get("kernels") or [], key=lambda k: -(k.get("device_ms") or 0))
        kernel_rows: list[tuple[str, ...]] = [(f"{name} kernels", "origin", "calls", "device ms")]
        kernel_rows += [(str(k.get("name", ""))[:60], str(k.get("origin", "")),
                         str(k.get("count", 1)), _num(k.get("device_ms")))
                        for k in kernels[:KERNELS_SHOWN]]
        lines += ["", _table(kernel_rows),
                  f"own kernels' share of device time: {_pct(block.get('own_share'))}"]
        if block.get("no_own_kernel_ran"):
            lines.append(f"note: {block.get('reason')}")
    for name, result in columns:
        cases = result.metadata.robustness
        if cases is not None:
            failed = [c.name for c in cases.cases if c.status == "failed"]
            named = f" ({', '.join(failed)})" if failed else ""
            tally = f"{cases.passed} passed, {cases.failed} failed{named}, {cases.skipped} skipped"
            lines += ["", f"{name} robustness: {tally}"]
    return lines


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def format_batch_line(result: CompareBatchResult, names: Sequence[str], done: int) -> str:
    """One candidate's answer, as it arrives: its verdict, timing, or the line of its error
    that says what went wrong (a traceback's exception line)."""
    response = result.response
    custom = response.kernel_exec_result
    head = f"[{done}/{len(names)}] #{result.index} {names[result.index]}  {result.verdict}"
    if result.state is not JobState.COMPLETED or response.status == "error":
        return f"{head}: {error_line(response.error or result.state.value)}"
    if custom is not None and custom.outcome is not Outcome.SUCCESS:
        problem = custom.compilation_error or custom.validation_error or custom.runtime_error
        return f"{head}: {error_line(problem or custom.outcome.value)}"
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
        ("languages", _languages(health)),
        ("compilation", health.compilation_service),
        ("profiling", health.profiling_service),
        ("device metrics", _yes(health.device_metrics_enabled)),
        ("version", health.version or "-"),
    ]
    if health.cluster is not None:
        rows.append(("cluster", _cluster(health.cluster)))
    return _table(rows)


def _languages(health: HealthResponse) -> str:
    """The kernel languages that run here with their versions, and how many do not."""
    here = [f"{lang.name} {lang.version}" for lang in health.languages if lang.available]
    missing = [lang.name for lang in health.languages if not lang.available]
    parts = [", ".join(here)] if here else []
    if missing:
        parts.append(f"not here: {', '.join(missing)} (see /health for why)")
    return "; ".join(parts) or "-"


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

