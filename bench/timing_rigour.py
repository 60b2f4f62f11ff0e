"""The server's timing figures beside independent timers, side by side in one run.

    python bench/timing_rigour.py [--out bench/results/timing_rigour.json] [--repeats 10]
    python bench/timing_rigour.py --quick      # tiny sizes; runs on a CPU-only host too

For kernels of about 5 us, 50 us, 1 ms and 10 ms (memory- and compute-bound; torch, triton and
cuda kernel types; a bf16 8192x8192 matmul among them) it starts a real server (as the tests
do), evaluates every kernel ``--repeats`` times with no ``num_trials`` (the adaptive stopping
rule), round-robin so that drift shows, then stops the server and measures the same operations
outside it. Columns:

- **server**: median over the evaluations of ``runtime_stats.median`` (isolated regime: one
  call after an L2 flush), and **CV**: the coefficient of variation of those medians. With
  ``--compare`` every evaluation is a ``/compare`` of the kernel against itself, and the figure
  is the candidate's, on the judge's clock (its interval less the hand-over's cost); the row
  then also has the **hand-over**'s cost subtracted and the **speedup** against the reference
  (the same code: 1.00);
- **samples**: the mean sample count the stopping rule took, and how it stopped;
- **graph** / **b2b**: the server's CUDA-graph figure (kernels under 0.1 ms) and back-to-back
  figure (1 ms and more), medians over the evaluations;
- **do_bench**: ``triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")``,
  median over ``--repeats`` runs round-robin, and its own CV over them (the yardstick for the
  server's); **do_bench, read flush**: the same once with its L2 flush a read of its buffer
  instead of a zeroing, as the server's timer flushes;
- **ncu**: ``gpu__time_duration.sum`` per call from ``ncu --metrics gpu__time_duration.sum
  --csv`` on a small standalone script per kernel (``--clock-control none --cache-control all``,
  5 calls in an NVTX range); ``n/a`` without ncu.

Writes the rows as JSON to ``--out`` and a markdown table to stdout. Bounded by ``--budget-s``
(default 450 s): evaluations stop early, and ncu is skipped, when the time runs out. On a host
without a GPU the GPU-only columns are ``n/a`` and the cuda kernels are skipped.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from profiling.ncu import find_ncu
from profiling.ncu_parse import ReportFormatError, records_from_csv
from tests.conftest import cuda_available, start_server

NCU_CALLS = 5
NCU_TIMEOUT_S = 120
NVTX_RANGE = "timing_rigour"

# ---- the kernels -------------------------------------------------------------------------------

TORCH_TEMPLATE = '''import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class Model(torch.nn.Module):
    def forward(self, {params}):
        return {expr}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
'''

TRITON_ADD = '''import triton
import triton.language as tl


@triton.jit
def add_kernel(x, y, out, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)
'''

CUDA_ADD = '''extern "C" __global__ void add(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + y[i];
}
'''

# A dependent chain of FMAs per element: compute-bound, ~10 ms at the full size.
CUDA_FMA = '''extern "C" __global__ void fma_loop(const float* x, float* out, int n, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float a = 0.5f / (1.0f + fabsf(x[i])), b = 0.5f;  // |a| < 1: b stays finite
        for (int k = 0; k < iters; ++k) b = fmaf(a, b, 0.25f);
        out[i] = b;
    }
}
'''

# Standalone script tails: ``make()`` builds the inputs on the GPU and returns the call.
LOCAL_TORCH = '''
def make():
    model, args = Model(), get_inputs()
    return lambda: model(*args)
'''

LOCAL_TRITON = '''
import torch


def make():
    n = {n}
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    grid = (triton.cdiv(n, 1024),)
    return lambda: add_kernel[grid](x, y, out, n, BLOCK_SIZE=1024, num_warps=4)
'''

LOCAL_CUDA = '''
import cupy
import numpy as np
import torch

SOURCE = {source!r}


def make():
    kernel = cupy.RawKernel(SOURCE, {name!r})
    tensors = [torch.randn(n, device="cuda") for n in {inputs!r}]
    tensors += [torch.empty(n, device="cuda") for n in {outputs!r}]
    args = tuple(np.uint64(t.data_ptr()) for t in tensors) + tuple(np.int32(v) for v in {ints!r})

    def call():
        stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        with stream:
            kernel(({grid},), ({block},), args)
    return call
'''

NCU_MAIN = '''

if __name__ == "__main__":
    fn = make()
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push({range!r})
    for _ in range({calls}):
        fn()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
'''


@dataclass
class Case:
    name: str
    kernel_type: str
    bound: str  # "memory" or "compute"
    size: str  # the intended duration class on an H100
    server_kernel: dict[str, Any]
    local_script: str  # defines make(); GPU only


def tensor_arg(name: str, n: int, role: str = "input", seed: int = 1) -> dict[str, Any]:
    spec: dict[str, Any] = {"shape": [n], "dtype": "float32"}
    if role != "output":
        spec["init"] = {"kind": "randn", "seed": seed}
    return {"name": name, "type": "tensor", "role": role, "tensor_spec": spec}


def torch_case(name: str, bound: str, size: str, expr: str, shapes: list[str],
               dtype: str = "float32") -> Case:
    params = ", ".join("abcd"[: len(shapes)])
    inputs = ", ".join(f"torch.randn({s}, device=DEVICE, dtype=torch.{dtype})" for s in shapes)
    source = TORCH_TEMPLATE.format(params=params, expr=expr, inputs=inputs)
    return Case(name, "torch", bound, size, {"source_code": source, "kernel_type": "torch"},
                source + LOCAL_TORCH)


def triton_add_case(name: str, size: str, n: int) -> Case:
    io = {"args": [tensor_arg("x", n, seed=1), tensor_arg("y", n, seed=2),
                   tensor_arg("out", n, "output"), {"name": "n", "type": "int", "value": n},
                   {"name": "BLOCK_SIZE", "type": "int", "value": 1024, "is_meta": True}],
          "launch": {"grid": {"x": "cdiv(n, BLOCK_SIZE)"}, "num_warps": 4}}
    return Case(name, "triton", "memory", size,
                {"source_code": TRITON_ADD, "kernel_type": "triton", "io": io},
                TRITON_ADD + LOCAL_TRITON.format(n=n))


def cuda_case(name: str, bound: str, size: str, source: str, kernel_name: str,
              inputs: list[int], outputs: list[int], ints: dict[str, int]) -> Case:
    n = outputs[0]
    grid = (n + 255) // 256
    args = [tensor_arg(f"in{i}", m, seed=i + 1) for i, m in enumerate(inputs)]
    args += [tensor_arg(f"out{i}", m, "output") for i, m in enumerate(outputs)]
    args += [{"name": k, "type": "int", "value": v} for k, v in ints.items()]
    io = {"args": args, "launch": {"grid": {"x": grid}, "block": {"x": 256}}}
    kernel = {"source_code": source, "kernel_type": "cuda", "io": io,
              "metadata": {"kernel_name": kernel_name}}
    local = LOCAL_CUDA.format(source=source, name=kernel_name, inputs=inputs, outputs=outputs,
                              ints=list(ints.values()), grid=grid, block=256)
    return Case(name, "cuda", bound, size, kernel, local)


def cases(quick: bool) -> list[Case]:
    """The kernels; ``quick`` shrinks every size so that a CPU host runs them in seconds."""
    q: Callable[[int, int], int] = lambda full, small: small if quick else full
    return [
        torch_case("relu_fp32", "memory", "~5 us", "torch.relu(a)", [str(q(1 << 18, 1 << 10))]),
        torch_case("relu_fp32_6M", "memory", "~20 us", "torch.relu(a)", [str(q(6 << 20, 1 << 10))]),
        cuda_case("add_fp32_5M", "memory", "~20 us", CUDA_ADD, "add",
                  [q(5 << 20, 1 << 10)] * 2, [q(5 << 20, 1 << 10)], {"n": q(5 << 20, 1 << 10)}),
        torch_case("matmul_fp32_2048", "compute", "~0.3 ms", "a @ b",
                   [f"{q(2048, 32)}, {q(2048, 32)}"] * 2),
        cuda_case("add_fp32", "memory", "~5 us", CUDA_ADD, "add",
                  [q(1 << 18, 1 << 10)] * 2, [q(1 << 18, 1 << 10)], {"n": q(1 << 18, 1 << 10)}),
        triton_add_case("add_fp32", "~50 us", q(12 << 20, 1 << 10)),
        # the same add at the same size in CUDA: what the size does, apart from the language
        cuda_case("add_fp32_12M", "memory", "~50 us", CUDA_ADD, "add",
                  [q(12 << 20, 1 << 10)] * 2, [q(12 << 20, 1 << 10)], {"n": q(12 << 20, 1 << 10)}),
        torch_case("matmul_fp16_2048", "compute", "~50 us", "a @ b",
                   [f"{q(2048, 32)}, {q(2048, 32)}"] * 2, "float16"),
        torch_case("matmul_bf16_8192", "compute", "~1 ms", "a @ b",
                   [f"{q(8192, 64)}, {q(8192, 64)}"] * 2, "bfloat16"),
        torch_case("relu_fp32_400M", "memory", "~1 ms", "torch.relu(a)",
                   [str(q(3 << 27, 1 << 12))]),
        torch_case("matmul_fp32_6144", "compute", "~10 ms", "a @ b",
                   [f"{q(6144, 64)}, {q(6144, 64)}"] * 2),
        cuda_case("fma_loop", "compute", "~10 ms", CUDA_FMA, "fma_loop",
                  [q(1 << 22, 1 << 10)], [q(1 << 22, 1 << 10)],
                  {"n": q(1 << 22, 1 << 10), "iters": q(60_000, 100)}),
    ]


# ---- measuring ---------------------------------------------------------------------------------


def evaluate_all(todo: list[Case], repeats: int, deadline: float,
                 compare: bool = False) -> dict[str, list[dict]]:
    """Every case ``repeats`` times through a real server, round-robin; stops at ``deadline``."""
    runs: dict[str, list[dict]] = {key(c): [] for c in todo}
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp), {"MAX_WORKERS": "1"})
        try:
            with httpx.Client(base_url=server.url, timeout=900) as client:
                for r in range(repeats):
                    for case in todo:
                        if time.monotonic() > deadline and r > 0:
                            print(f"# budget spent: {case.name} has {r} evaluations", flush=True)
                            continue
                        runs[key(case)].append(evaluate_once(client, case, compare))
        finally:
            server.stop()
    return runs


def _clock_note(state: Any) -> str:
    """"@1980MHz" (and "+sw_power_cap" for each clock limit seen) from a result's gpu_state."""
    if not isinstance(state, dict):
        return ""
    limits = "".join(f"+{name}" for name in state.get("clock_limits") or [])
    return f"@{(state.get('sm_clock_mhz') or {}).get('median', '?')}MHz{limits}"


def evaluate_once(client: httpx.Client, case: Case, compare: bool = False) -> dict[str, Any]:
    started = time.monotonic()
    if compare:
        r = client.post("/compare", json={"ref_kernel": case.server_kernel,
                                          "custom_kernel": case.server_kernel, "timeout": 600,
                                          "num_correct_trials": 3})
    else:
        r = client.post("/evaluate", json={"kernel": case.server_kernel, "timeout": 600})
    body = r.json()
    result = body.get("kernel_exec_result") or {}
    stats = result.get("runtime_stats") or {}
    meta = result.get("metadata") or {}
    figures = meta.get("timing_figures") or {}
    if result.get("outcome") != "success":
        error = (body.get("error") or result.get("compilation_error")
                 or result.get("runtime_error") or result.get("validation_error"))
        return {"error": str(error)[:300]}
    calls = meta.get("worker_calls") or {}
    ref = (body.get("ref_exec_result") or {}).get("runtime_stats") or {}
    traced = meta.get("provenance") or {}  # the candidate's traced call
    judged = {"handover_ms": figures.get("handover_ms"),
              "handover_before_ms": figures.get("handover_before_ms"),
              "handover_between_ms": figures.get("handover_between_ms"),
              "handover_allowance_ms": figures.get("handover_allowance_ms"),
              "traced_busy_ms": traced.get("busy_ms"),
              "traced_kernels": [(k.get("name", "")[:60], k.get("count"), k.get("device_ms"))
                                 for k in (traced.get("kernels") or [])[:4]],
              "traced_memory_ops": [(k.get("name", "")[:40], k.get("count"), k.get("device_ms"))
                                    for k in (traced.get("memory_ops") or [])[:4]],
              "speedup": meta.get("speedup"),
              "reference_ms": ref.get("median"),
              "calibrate_ms": (calls.get("custom.calibrate") or {}).get("ms"),
              "stage_ms": body.get("stage_timings")} if compare else {}
    return {**judged, "median_ms": stats.get("median"), "samples": stats.get("num_samples"),
            "stopped_by": figures.get("stopped_by"), "median_rse": figures.get("median_rse"),
            "cuda_graph_ms": figures.get("cuda_graph_ms"),
            "cuda_graph_reason": figures.get("cuda_graph_reason"),
            "back_to_back_ms": figures.get("back_to_back_ms"),
            "back_to_back_reason": figures.get("back_to_back_reason"),
            "suspicious": bool((result.get("integrity") or {}).get("suspicious")),
            "gpu_state": (result.get("metadata") or {}).get("gpu_state"),
            "wall_s": round(time.monotonic() - started, 2)}


def write_script(case: Case, workdir: Path) -> Path:
    """The case as a standalone script (a file: Triton reads a kernel's source from it)."""
    script = workdir / f"case_{case.kernel_type}_{case.name}.py"
    script.write_text(case.local_script + NCU_MAIN.format(range=NVTX_RANGE, calls=NCU_CALLS))
    return script


def load_make(script: Path) -> Callable[[], Callable[[], Any]]:
    spec = importlib.util.spec_from_file_location(script.stem, script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make


def do_bench_medians(scripts: dict[str, Path], repeats: int) -> dict[str, list[float] | str]:
    """``do_bench``'s median per case, ``repeats`` times, round-robin (as the server's runs):
    its own spread over repeats is the yardstick for the server's CV."""
    try:
        import triton.testing
    except Exception as exc:  # noqa: BLE001 - a column of the table, not a crash of the bench
        return dict.fromkeys(scripts, f"n/a ({type(exc).__name__}: {str(exc)[:120]})")
    calls: dict[str, Callable[[], Any] | str] = {}
    for name, script in scripts.items():
        try:
            calls[name] = load_make(script)()
        except Exception as exc:  # noqa: BLE001
            calls[name] = f"n/a ({type(exc).__name__}: {str(exc)[:120]})"
    out: dict[str, list[float] | str] = {
        name: (fn if isinstance(fn, str) else []) for name, fn in calls.items()}
    for _ in range(repeats):
        for name, fn in calls.items():
            kept = out[name]
            if isinstance(fn, str) or isinstance(kept, str):
                continue
            try:
                kept.append(float(triton.testing.do_bench(fn, warmup=25, rep=100,
                                                          return_mode="median")))
            except Exception as exc:  # noqa: BLE001
                out[name] = f"n/a ({type(exc).__name__}: {str(exc)[:120]})"
    return out


def do_bench_read_flush(scripts: dict[str, Path]) -> dict[str, float | str]:
    """``do_bench`` with its L2 flush made a read of the same buffer instead of a zeroing:
    what the server's timer does. Between this and ``do_bench`` lies the cost the zeroing's
    dirty lines add to the call (``harness.timer``); the same function otherwise."""
    try:
        import triton
        import triton.testing

        driver = triton.runtime.driver.active
        zeroing = driver.clear_cache
    except Exception as exc:  # noqa: BLE001
        return dict.fromkeys(scripts, f"n/a ({type(exc).__name__}: {str(exc)[:120]})")
    out: dict[str, float | str] = {}
    try:
        driver.clear_cache = lambda cache: cache.sum()
        for name, script in scripts.items():
            try:
                out[name] = float(triton.testing.do_bench(load_make(script)(), warmup=25,
                                                          rep=100, return_mode="median"))
            except Exception as exc:  # noqa: BLE001
                out[name] = f"n/a ({type(exc).__name__}: {str(exc)[:120]})"
    finally:
        driver.clear_cache = zeroing
    return out


def ncu_ms(script: Path, ncu: str | None, timeout_s: float) -> float | str:
    """gpu__time_duration per call under ncu, on the standalone script of a case."""
    if ncu is None:
        return "n/a (ncu not found)"
    command = [ncu, "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/", "--metrics",
               "gpu__time_duration.sum", "--csv", "--clock-control", "none", "--cache-control",
               "all", "--target-processes", "all", sys.executable, str(script)]
    # its own session: on a timeout, ncu and the python it launched are stopped together
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return f"n/a (ncu ran past {timeout_s:.0f} s)"
    try:
        records = records_from_csv(stdout)
    except ReportFormatError:
        tail = (stderr or stdout).strip().splitlines()[-1:] or ["no output"]
        return f"n/a (ncu exit {proc.returncode}: {tail[0][:120]})"
    seconds = [r.number("gpu__time_duration.sum") for r in records]
    if not seconds or any(s is None for s in seconds):
        return "n/a (ncu reported no duration)"
    return sum(s for s in seconds if s is not None) * 1e3 / NCU_CALLS


def key(case: Case) -> str:
    return f"{case.kernel_type}:{case.name}"


# ---- the table ---------------------------------------------------------------------------------


def cv(values: list[float]) -> float | None:
    """Coefficient of variation (sample standard deviation over mean)."""
    if len(values) < 2 or statistics.mean(values) <= 0:
        return None
    return statistics.stdev(values) / statistics.mean(values)


def summarize(case: Case, runs: list[dict], benches: list[float] | str,
              ncu: float | str) -> dict:
    ok = [r for r in runs if "error" not in r and r.get("median_ms") is not None]
    medians = [r["median_ms"] for r in ok]
    b2b = [r["back_to_back_ms"] for r in ok if isinstance(r.get("back_to_back_ms"), float)]
    bench: float | str = benches if isinstance(benches, str) else (
        statistics.median(benches) if benches else "n/a (no do_bench run)")
    row: dict[str, Any] = {
        "kernel": case.name, "type": case.kernel_type, "bound": case.bound, "size": case.size,
        "evaluations": len(ok), "errors": [r["error"] for r in runs if "error" in r][:3],
        "server_median_ms": statistics.median(medians) if medians else None,
        "server_cv": cv(medians),
        "samples_mean": statistics.mean(r["samples"] for r in ok) if ok else None,
        "stopped_by": sorted({r["stopped_by"] for r in ok if r.get("stopped_by")}),
        "cuda_graph_ms": _median_of(ok, "cuda_graph_ms"),
        "cuda_graph_reason": _first(ok, "cuda_graph_reason"),
        "back_to_back_ms": _median_of(ok, "back_to_back_ms"),
        "back_to_back_cv": cv(b2b),
        "back_to_back_reason": _first(ok, "back_to_back_reason"),
        "suspicious_runs": sum(r["suspicious"] for r in ok),
        "handover_ms": _median_of(ok, "handover_ms"),
        "traced_busy_ms": _median_of(ok, "traced_busy_ms"),
        "calibrate_ms": _median_of(ok, "calibrate_ms"), "speedup": _median_of(ok, "speedup"),
        "speedups": [r.get("speedup") for r in ok],
        "do_bench_median_ms": bench, "ncu_gpu_time_ms": ncu, "runs": runs,
        "do_bench_cv": None if isinstance(benches, str) else cv(benches),
        "do_bench_runs_ms": None if isinstance(benches, str) else benches,
    }
    if isinstance(bench, float) and row["server_median_ms"]:
        row["server_over_do_bench"] = row["server_median_ms"] / bench
    if isinstance(ncu, float) and row["server_median_ms"]:
        row["server_over_ncu"] = row["server_median_ms"] / ncu
    return row


def _median_of(runs: list[dict], field: str) -> float | None:
    values = [r[field] for r in runs if isinstance(r.get(field), (int, float))]
    return statistics.median(values) if values else None


def _first(runs: list[dict], field: str) -> str | None:
    return next((r[field] for r in runs if r.get(field)), None)


def fmt(value: Any, digits: int = 4) -> str:
    if isinstance(value, float):
        return "n/a" if math.isnan(value) else f"{value:.{digits}g}"
    if value is None:
        return "-"
    text = str(value)
    return text if len(text) <= 24 else text[:21] + "..."


def _pct(value: Any) -> str:
    return f"{value:.2%}" if isinstance(value, float) else "-"


def markdown(rows: list[dict]) -> str:
    head = ["kernel", "type", "bound", "size", "server median ms", "CV", "flagged",
            "hand-over ms", "speedup (same code)", "samples (stop)",
            "do_bench ms", "do_bench CV", "do_bench, read flush ms", "ncu ms", "CUDA graph ms", "back-to-back ms (CV)",
            "server/do_bench", "server/ncu"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        stop = "/".join(r["stopped_by"]) or "-"
        samples = f"{fmt(r['samples_mean'], 3)} ({stop})"
        b2b = fmt(r["back_to_back_ms"])
        if isinstance(r.get("back_to_back_cv"), float):
            b2b += f" ({_pct(r['back_to_back_cv'])})"
        cells = [r["kernel"], r["type"], r["bound"], r["size"], fmt(r["server_median_ms"]),
                 _pct(r["server_cv"]), f"{r['suspicious_runs']}/{r['evaluations']}",
                 fmt(r["handover_ms"]), fmt(r["speedup"], 3), samples,
                 fmt(r["do_bench_median_ms"]),
                 _pct(r.get("do_bench_cv")), fmt(r.get("do_bench_read_flush_ms")),
                 fmt(r["ncu_gpu_time_ms"]), fmt(r["cuda_graph_ms"]),
                 b2b, fmt(r.get("server_over_do_bench"), 3), fmt(r.get("server_over_ncu"), 3)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/timing_rigour.json")
    parser.add_argument("--repeats", type=int, help="evaluations per kernel (10; 3 with --quick)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a CPU host, a smoke run)")
    parser.add_argument("--budget-s", type=float, default=450.0, help="time for the whole run")
    parser.add_argument("--compare", action="store_true",
                        help="time each kernel as a /compare candidate (the judge's clock)")
    parser.add_argument("--skip-local", action="store_true",
                        help="no do_bench and no ncu columns (the server's figures only)")
    parser.add_argument("--skip-do-bench", action="store_true",
                        help="no do_bench columns (ncu still measured)")
    parser.add_argument("--only", type=lambda v: v.split(","), default=None,
                        help="comma-separated kernel names (e.g. matmul_bf16_8192); default all")
    args = parser.parse_args(argv)
    started = time.monotonic()
    gpu = cuda_available()
    repeats = args.repeats or (3 if args.quick else 10)
    todo = [c for c in cases(args.quick) if (gpu or c.kernel_type != "cuda")
            and (args.only is None or c.name in args.only)]
    # evaluations get about 70% of the budget; do_bench and ncu the rest
    runs = evaluate_all(todo, repeats, started + 0.7 * args.budget_s, args.compare)
    gpu_local = gpu and not args.skip_local
    ncu = find_ncu("ncu") if gpu_local else None
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        scripts = {key(case): write_script(case, Path(tmp)) for case in todo}
        bench = gpu_local and not args.skip_do_bench
        benches = (do_bench_medians(scripts, repeats) if bench
                   else dict.fromkeys(scripts, "n/a (not measured)"))
        read_flush = (do_bench_read_flush(scripts) if bench
                      else dict.fromkeys(scripts, "n/a (not measured)"))
        for case in todo:
            script = scripts[key(case)]
            if not gpu_local:
                measured: float | str = "n/a (not measured)"
            elif (left := args.budget_s - (time.monotonic() - started)) < 20:
                measured = "n/a (budget spent)"
            else:
                measured = ncu_ms(script, ncu, min(NCU_TIMEOUT_S, left))
            row = summarize(case, runs[key(case)], benches[key(case)], measured)
            row["do_bench_read_flush_ms"] = read_flush[key(case)]
            rows.append(row)
    report = {"host": platform.node(), "gpu": _gpu_name() if gpu else None, "quick": args.quick,
              "mode": "compare (judge)" if args.compare else "evaluate",
              "repeats": repeats, "seconds": round(time.monotonic() - started, 1), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str))
    print(markdown(rows))
    # Each evaluation's median, in order (* flagged): what the CV is made of, in the log too,
    # with the SM clock's median under it and the clock limits the driver named (gpu_state).
    for r in rows:
        medians = " ".join(f"{fmt(run.get('median_ms'))}{'*' if run.get('suspicious') else ''}"
                           f"{_clock_note(run.get('gpu_state'))}" for run in r.get("runs", []))
        print(f"{r['kernel']} ({r['type']}) medians ms: {medians}")
        if args.compare:  # the hand-over's cost each evaluation subtracted, and its sources
            costs = " ".join(f"{fmt(run.get('handover_ms'), 6)}(cal {fmt(run.get('handover_before_ms'), 6)}"
                             f", between {fmt(run.get('handover_between_ms'), 6)})"
                             for run in r.get("runs", []))
            print(f"    hand-over ms: {costs}")
            print(f"    traced call (CUPTI, the kernel's process): busy "
                  f"{fmt(r.get('traced_busy_ms'))} ms; {(r.get('runs') or [{}])[0].get('traced_kernels')}"
                  f" {(r.get('runs') or [{}])[0].get('traced_memory_ops')}")
    print(f"\n{len(rows)} kernels, {repeats} evaluations each, {report['seconds']} s; "
          f"JSON in {args.out}")
    skipped = [c.name for c in cases(args.quick) if c not in todo and c.kernel_type == "cuda"
               and (args.only is None or c.name in args.only)]
    if skipped:
        print(f"skipped without a GPU: {', '.join(skipped)}")
    return 0


def _gpu_name() -> str | None:
    try:
        import torch

        return str(torch.cuda.get_device_name(0))
    except Exception:  # noqa: BLE001
        return None


if __name__ == "__main__":
    sys.exit(main())
