"""bench/job_overhead.py keeps what it measured when a run is cut short (by a time limit, after
some of its configurations): each is written as it finishes."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("job_overhead", ROOT / "bench" / "job_overhead.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_run_cut_short_keeps_the_configurations_it_finished(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = load()
    measured: list[dict[str, str]] = []

    def measure(env: dict[str, str], jobs: int) -> dict[str, Any]:
        if measured:
            raise SystemExit("killed by the time limit")
        measured.append(env)
        return {"wall_ms": {"p50": 1.0}, "overhead_ms": {"p50": 1.0}, "jobs": jobs}

    monkeypatch.setattr(bench, "measure", measure)
    out = tmp_path / "results" / "overhead.json"
    monkeypatch.setattr(sys, "argv", ["job_overhead.py", "--jobs", "3", "--spares", "auto,6",
                                      "--pool-only", "--out", str(out)])
    with pytest.raises(SystemExit):
        bench.main()
    kept = json.loads(out.read_text())
    assert list(kept) == ["pool (auto spares)"]
    assert kept["pool (auto spares)"]["jobs"] == 3


def test_exits_are_read_from_the_pools_log_apart_by_whether_workers_were_starting() -> None:
    bench = load()
    log = ("x kernel_eval.workers gpu0 worker gone 50.5 ms after its kill (0 starting, 3 ready)\n"
           "x kernel_eval.workers gpu0 worker gone 90.0 ms after its kill (4 starting, 2 ready)\n"
           "x kernel_eval.workers gpu0 worker gone 110.0 ms after its kill (1 starting, 2 ready)\n"
           "x kernel_eval.workers gpu0 worker ready in 1500 ms (context_ms 900)\n")
    exits = bench.worker_exits(log)
    assert exits["worker_exit_ms"]["max"] == 110.0 and exits["worker_exit_ms"]["min"] == 50.5
    assert exits["worker_exit_ms_none_starting"]["p50"] == 50.5
    assert exits["worker_exit_ms_some_starting"]["p50"] == 100.0
    assert bench.worker_exits("no exits logged") == {
        "worker_exit_ms": None, "worker_exit_ms_none_starting": None,
        "worker_exit_ms_some_starting": None}
