"""Reading an Nsight Compute report into one :class:`KernelRecord` per profiled kernel.

Two readers give the same records:

* :func:`records_from_report` uses NVIDIA's ``ncu_report`` Python module (the ``ncu-report``
  package on PyPI, or ``<ncu install>/extras/python``) on the ``.ncu-rep`` file;
* :func:`records_from_csv` parses what ``ncu --import R --csv --page raw --print-units base``
  prints: a header row of column names (identification columns such as ``"ID"`` and
  ``"Kernel Name"``, then one column per metric), a row of units, and one row per kernel.
  ncu's long form (``"Metric Name"``/``"Metric Unit"``/``"Metric Value"`` columns, one row per
  metric) is read too.

Metric values are numbers in base SI units (seconds, bytes, hertz, bytes per second, ...)
whatever prefix the unit carried (``usecond``, ``Kbyte``, ``Ghz``); percentages stay
percentages. A metric ncu printed as ``n/a`` or left empty is absent from the record, never 0.

Run as ``python -m profiling.ncu_parse REPORT OUT.json [--ncu NCU]`` it reads REPORT with
``ncu_report`` (looked up next to NCU when it is not importable) and writes the records as
JSON; the server runs it in a child process so that the native module never loads into the
server. Exit status :data:`EXIT_NO_MODULE` means ``ncu_report`` could not be imported.
"""

from __future__ import annotations

import csv
import glob
import json
import math
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

MetricValue = float | int | str

# Columns of ncu's raw page that describe the kernel rather than measure it.
ID_COLUMNS = frozenset({
    "ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time", "Context",
    "Stream", "Block Size", "Grid Size", "Device", "CC", "Function Name", "Demangled Name",
    "Mangled Name", "Section Name", "Metric Name", "Metric Unit", "Metric Value", "Rule Name",
    "Rule Type", "Rule Description", "Estimated Speedup Type", "Estimated Speedup",
})
_PREFIXES = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_UNIT_WORDS = frozenset({
    "second", "byte", "hz", "cycle", "inst", "sector", "request", "warp", "thread", "block",
    "register", "wavefront", "flop", "transaction", "instruction", "bit",
    "s",  # ncu_report spells durations "ns", "us", "ms" as well as "nsecond"
})
_MISSING = {"", "n/a", "N/A", "nan", "-"}

EXIT_NO_MODULE = 3


@dataclass
class KernelRecord:
    """One profiled kernel launch: its name, launch shape and metric values (base units)."""

    id: int
    name: str
    block_size: str | None = None  # e.g. "(256, 1, 1)"
    grid_size: str | None = None
    metrics: dict[str, MetricValue] = field(default_factory=dict)

    def number(self, name: str) -> float | None:
        value = self.metrics.get(name)
        return float(value) if isinstance(value, (int, float)) else None


class ReportFormatError(ValueError):
    """The text is not an ncu CSV export this module understands."""


# ---- units -----------------------------------------------------------------------------------


def unit_factor(unit: str) -> float:
    """What to multiply a value printed in ``unit`` by to get base units (``Kbyte`` → 1e3)."""
    numerator, _, denominator = unit.strip().partition("/")
    factor = _word_factor(numerator)
    if denominator:
        factor /= _word_factor(denominator)
    return factor


def _word_factor(word: str) -> float:
    word = word.strip()
    if not word or word.lower() in _UNIT_WORDS:
        return 1.0
    if word[0] in _PREFIXES and word[1:].lower() in _UNIT_WORDS:
        return _PREFIXES[word[0]]
    return 1.0


def parse_value(text: str, unit: str = "") -> MetricValue | None:
    """A printed metric value in base units; None for ncu's "not available" spellings."""
    text = text.strip()
    if text in _MISSING:
        return None
    plain = text.replace(",", "")
    try:
        number: float | int = int(plain)
    except ValueError:
        try:
            number = float(plain)
        except ValueError:
            return text  # a string metric, e.g. a device name or a cache configuration
    if isinstance(number, float) and math.isnan(number):
        return None
    factor = unit_factor(unit) if unit else 1.0
    return number if factor == 1.0 else number * factor


# ---- CSV ---------------------------------------------------------------------------------------


def records_from_csv(text: str) -> list[KernelRecord]:
    """Parse ``ncu --csv --page raw`` output (wide form or ncu's long form)."""
    rows = list(csv.reader(_csv_lines(text)))
    if not rows:
        raise ReportFormatError("no CSV header row (a line starting with \"ID\") in ncu's output")
    header = rows[0]
    if "Metric Name" in header and "Metric Value" in header:
        return _long_form(header, rows[1:])
    return _wide_form(header, rows[1:])


def _csv_lines(text: str) -> Iterator[str]:
    started = False
    for line in text.splitlines():
        if line.startswith("=="):  # ==PROF==, ==WARNING==, ==ERROR== lines of ncu itself
            continue
        if not started:
            started = line.startswith('"ID",')
            if not started:
                continue
        if line.strip():
            yield line


def _wide_form(header: list[str], rows: list[list[str]]) -> list[KernelRecord]:
    units = [""] * len(header)
    if rows and rows[0] and rows[0][0] == "":  # the units row: no ID
        units = rows[0] + [""] * (len(header) - len(rows[0]))
        rows = rows[1:]
    columns = {name: i for i, name in enumerate(header)}
    records: list[KernelRecord] = []
    for row in rows:
        if len(row) != len(header):
            raise ReportFormatError(f"a row has {len(row)} cells, the header {len(header)}")
        cell = {name: row[i] for name, i in columns.items()}
        metrics: dict[str, MetricValue] = {}
        for i, name in enumerate(header):
            if name in ID_COLUMNS:
                continue
            value = parse_value(row[i], units[i])
            if value is not None:
                metrics[name] = value
        records.append(KernelRecord(
            id=_int_or(cell.get("ID"), len(records)), name=_kernel_name(cell),
            block_size=cell.get("Block Size") or None, grid_size=cell.get("Grid Size") or None,
            metrics=metrics,
        ))
    return records


def _long_form(header: list[str], rows: list[list[str]]) -> list[KernelRecord]:
    columns = {name: i for i, name in enumerate(header)}
    by_id: dict[str, KernelRecord] = {}
    for row in rows:
        if len(row) != len(header):
            raise ReportFormatError(f"a row has {len(row)} cells, the header {len(header)}")
        cell = {name: row[i] for name, i in columns.items()}
        key = cell.get("ID", "")
        record = by_id.get(key)
        if record is None:
            record = by_id[key] = KernelRecord(
                id=_int_or(key, len(by_id)), name=_kernel_name(cell),
                block_size=cell.get("Block Size") or None, grid_size=cell.get("Grid Size") or None,
            )
        value = parse_value(cell["Metric Value"], cell.get("Metric Unit", ""))
        if value is not None:
            record.metrics[cell["Metric Name"]] = value
    return list(by_id.values())


def _kernel_name(cell: dict[str, str]) -> str:
    for column in ("Kernel Name", "Function Name", "Demangled Name", "Mangled Name"):
        if cell.get(column):
            return cell[column]
    return "?"


def _int_or(text: str | None, default: int) -> int:
    try:
        return int((text or "").replace(",", ""))
    except ValueError:
        return default


# ---- ncu_report ----------------------------------------------------------------------------


def records_from_report(path: Path) -> list[KernelRecord]:
    """Read a ``.ncu-rep`` file with NVIDIA's ``ncu_report`` module (must be importable)."""
    import ncu_report

    context = ncu_report.load_report(str(path))
    records: list[KernelRecord] = []
    for r in range(context.num_ranges()):
        profiled_range = context.range_by_idx(r)
        for a in range(profiled_range.num_actions()):
            action = profiled_range.action_by_idx(a)
            metrics: dict[str, MetricValue] = {}
            for name in action.metric_names():
                metric = action.metric_by_name(name)
                if metric is None or not metric.has_value():
                    continue
                value = metric.value()
                if isinstance(value, bool) or value is None:
                    continue
                if isinstance(value, (int, float)):
                    factor = unit_factor(metric.unit() or "")
                    metrics[name] = value if factor == 1.0 else value * factor
                elif str(value).strip() not in _MISSING:
                    metrics[name] = str(value)
            records.append(KernelRecord(
                id=len(records), name=str(action.name()), metrics=metrics,
                block_size=_dim3(metrics, "launch__block_dim"),
                grid_size=_dim3(metrics, "launch__grid_dim"),
            ))
    return records


def _dim3(metrics: dict[str, MetricValue], prefix: str) -> str | None:
    parts = [metrics.get(f"{prefix}_{axis}") for axis in "xyz"]
    if any(not isinstance(p, (int, float)) for p in parts):
        return None
    return "(" + ", ".join(str(int(p)) for p in parts if p is not None) + ")"


def ncu_report_dirs(ncu: str | None) -> list[str]:
    """Where an ncu installation keeps its ``ncu_report`` module (``extras/python``)."""
    if not ncu:
        return []
    real = Path(os.path.realpath(ncu))
    candidates = [real.parent / "extras" / "python"]
    # /usr/local/cuda/bin/ncu is a launcher; the tool lives in ../nsight-compute-<version>/.
    pattern = real.parent.parent / "nsight-compute*" / "extras" / "python"
    candidates += [Path(p) for p in sorted(glob.glob(str(pattern)), reverse=True)]
    return [
        str(c) for c in candidates if (c / "ncu_report.py").exists() or (c / "ncu_report").is_dir()
    ]


def records_to_json(records: Iterable[KernelRecord]) -> str:
    return json.dumps([asdict(r) for r in records])


def records_from_json(text: str) -> list[KernelRecord]:
    return [KernelRecord(**item) for item in json.loads(text)]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 4) or (len(args) == 4 and args[2] != "--ncu"):
        print("usage: python -m profiling.ncu_parse REPORT OUT.json [--ncu NCU]", file=sys.stderr)
        return 2
    report, out = Path(args[0]), Path(args[1])
    try:
        records = records_from_report(report)
    except ImportError:  # not on the path: try the ncu installation's own copy
        sys.path[:0] = ncu_report_dirs(args[3] if len(args) == 4 else None)
        try:
            records = records_from_report(report)
        except ImportError as exc:
            print(f"ncu_report is not importable: {exc}", file=sys.stderr)
            return EXIT_NO_MODULE
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(records_to_json(records))
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
