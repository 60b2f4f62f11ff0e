"""Identity compares: each KernelBench problem against itself renamed ``ModelNew``, through a real
server. Identical code must read a speedup of 1.00, unflagged: the first test of any change to
how the reference and the candidate are timed.

    python bench/identity.py DIR [DIR ...] [--out identity.json] [--budget-s 540]

Each DIR holds KernelBench problem files (``Model``, ``get_inputs``, ``get_init_inputs``);
every ``*.py`` in it is compared once, in name order, with ``reuse_reference: false`` (the
reference timed afresh each time, as the first comparison of a search loop's reference is).
Prints one line per problem as it finishes (speedup, both figures, the hand-over's cost,
flags) and a summary: how many read within 0.95-1.05 unflagged.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import start_server

BAND = (0.95, 1.05)


def identity_body(source: str, num_trials: int | None) -> dict[str, Any]:
    renamed = source.replace("class Model(", "class ModelNew(").replace(
        "super(Model, self)", "super(ModelNew, self)")
    return {"ref_kernel": {"source_code": source, "kernel_type": "torch"},
            "custom_kernel": {"source_code": renamed, "kernel_type": "torch"},
            "reuse_reference": False, "num_trials": num_trials, "timeout": 600}


def row(name: str, body: dict[str, Any], wall_s: float) -> dict[str, Any]:
    kernel = body.get("kernel_exec_result") or {}
    ref = body.get("ref_exec_result") or {}
    meta = kernel.get("metadata") or {}
    figures = meta.get("timing_figures") or {}
    ref_figures = (ref.get("metadata") or {}).get("timing_figures") or {}
    integrity = kernel.get("integrity") or {}
    return {"problem": name, "outcome": kernel.get("outcome"),
            "correct": kernel.get("correctness"), "speedup": meta.get("speedup"),
            "reference_ms": (ref.get("runtime_stats") or {}).get("median"),
            "candidate_ms": (kernel.get("runtime_stats") or {}).get("median"),
            "handover_ms": figures.get("handover_ms"),
            "reference_handover_ms": ref_figures.get("handover_ms"),
            "regime": figures.get("regime"), "reference_regime": ref_figures.get("regime"),
            # the reference timed beside the candidate, their samples in turn (judge.beside)
            "reference_interleaved": any(str(c).startswith("timed beside") for c in
                                         (ref.get("integrity") or {}).get("checks") or []),
            "samples": figures.get("samples"), "cut_short": figures.get("cut_short"),
            "suspicious": bool(integrity.get("suspicious")),
            "reasons": integrity.get("reasons") or [],
            "speedup_statistic": meta.get("speedup_statistic"),
            # the per-sample ratios' spread, where the two sides were timed in turn
            "paired_check": next((c for c in integrity.get("checks") or []
                                  if str(c).startswith("speedup: the median of")), None),
            "error": body.get("error") or kernel.get("runtime_error")
            or kernel.get("validation_error") or kernel.get("compilation_error"),
            "wall_s": round(wall_s, 1),
            # what each side's traced call ran and the GPU's clock while it was timed: where
            # identical code reads apart, whether the two processes ran the same kernels
            "sides": {"candidate": side(kernel), "reference": side(ref)}}


def side(result: dict[str, Any]) -> dict[str, Any]:
    """One side's samples' spread, SM clock while timed, and its traced call: the device busy,
    the host's wall time, and the kernels that took the most device time."""
    meta = result.get("metadata") or {}
    stats = result.get("runtime_stats") or {}
    clock = ((meta.get("gpu_state") or {}).get("sm_clock_mhz") or {}).get("median")
    trace = meta.get("provenance") or {}
    kernels = sorted(trace.get("kernels") or [], key=lambda k: -float(k.get("device_ms") or 0))
    return {"min_ms": stats.get("min"), "max_ms": stats.get("max"), "sm_clock_mhz": clock,
            "busy_ms": trace.get("busy_ms"), "wall_ms": trace.get("wall_ms"),
            "launches": sum(int(k.get("count") or 0) for k in trace.get("kernels") or []),
            "top_kernels": [[(k.get("demangled") or k.get("name") or "")[:80], k.get("count"),
                             round(float(k.get("device_ms") or 0), 3)] for k in kernels[:6]]}


def within(r: dict[str, Any]) -> bool:
    s = r.get("speedup")
    return isinstance(s, (int, float)) and BAND[0] <= s <= BAND[1] and not r["suspicious"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=Path("identity.json"))
    parser.add_argument("--budget-s", type=float, default=540.0)
    parser.add_argument("--num-trials", type=int, default=None)
    args = parser.parse_args(argv)
    problems = sorted((p for d in args.dirs for p in d.glob("*.py")),
                      key=lambda p: (p.parent.name, int(p.name.split("_")[0])
                                     if p.name.split("_")[0].isdigit() else 0, p.name))
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp), {"MAX_WORKERS": "1"})
        try:
            with httpx.Client(base_url=server.url, timeout=900) as client:
                for path in problems:
                    if time.monotonic() - started > args.budget_s:
                        print(f"# budget spent before {path.name}", flush=True)
                        break
                    t0 = time.monotonic()
                    r = client.post("/compare", json=identity_body(path.read_text(),
                                                                   args.num_trials))
                    rows.append(row(path.stem, r.json(), time.monotonic() - t0))
                    x = rows[-1]
                    print(f"{x['problem']:<40} {x['outcome']} speedup {x['speedup']} "
                          f"ref {x['reference_ms']} cand {x['candidate_ms']} "
                          f"handover {x['handover_ms']} {x['regime']} "
                          f"{'FLAGGED ' + '; '.join(x['reasons'])[:200] if x['suspicious'] else ''}"
                          f"{x['error'] or ''} ({x['wall_s']} s)", flush=True)
        finally:
            server.stop()
    good = [r for r in rows if within(r)]
    speedups = [r["speedup"] for r in rows if isinstance(r.get("speedup"), (int, float))]
    summary = {"problems": len(rows), "within_band_unflagged": len(good), "band": BAND,
               "flagged": sum(r["suspicious"] for r in rows),
               # each problem outside the band or flagged, with its speedup and first reason
               "outside": {r["problem"]: [r["speedup"], (r["reasons"] or [None])[0]]
                           for r in rows if not within(r)},
               "median_speedup": statistics.median(speedups) if speedups else None,
               "seconds": round(time.monotonic() - started, 1)}
    args.out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    print(f"\n{summary['within_band_unflagged']} of {summary['problems']} within "
          f"{BAND[0]}-{BAND[1]} unflagged; {summary['flagged']} flagged; median speedup "
          f"{summary['median_speedup']}; {summary['seconds']} s")
    for problem, (speedup, reason) in summary["outside"].items():
        print(f"  outside: {problem} {speedup} {reason or ''}"[:300])
    return 0


if __name__ == "__main__":
    sys.exit(main())
