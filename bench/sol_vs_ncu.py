"""Speed-of-light fractions estimated by :mod:`profiling.sol` beside Nsight Compute's own, for a
bandwidth-bound copy, an add, and a bf16 matmul, on the GPU of this host.

    python bench/sol_vs_ncu.py OUT.json [--copy-mb 256] [--matmul-n 8192] [--samples 50]
                               [--clock-control none|base] [--ncu PATH] [--no-ncu]

For each case: the kernel's median over CUDA-event samples (an L2 flush before each), the
problem's FLOPs and bytes as the judge counts them (:func:`judge.flops.count_work`, on the
case's own inputs), and the block :func:`profiling.sol.speed_of_light` makes of them. Then
one ncu run per case profiles one call inside an NVTX range (``--cache-control all``, clocks
as ``--clock-control`` says; ``none`` by default, the clocks the events saw) and reads:

- memory: ``dram__throughput.avg.pct_of_peak_sustained_elapsed`` (``gpu__dram_throughput``
  in the ncu versions that name it so), the DRAM's bytes per second over its peak across the
  kernel's duration: what the estimate's achieved bytes/s over the datasheet bandwidth means;
- compute: ``sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed`` (or the
  gmma/hmma pipe's, whichever the GPU has), the share of the kernel's cycles the tensor pipe
  was busy: the achieved tensor FLOP rate over the peak at the clock it ran, what the
  estimate's achieved FLOP/s over the datasheet's dense bf16 rate means; ``sm__throughput``
  (the busiest SM unit, what ncu's speed-of-light section calls compute) beside it.

Printed side by side with their ratio (estimate / ncu), and written to OUT.json with ncu's
duration, the SM and DRAM clocks it saw and the DRAM peak it divides by, which explain a
ratio away from 1 (a datasheet's tensor rate is at its boost clock; a busy GPU runs slower).
Also the estimate at ncu's own duration (the same kernel call, so only the peaks differ).
Every failure is written down and the script goes on; it needs no network.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "client")]

import torch

from compilation.base import Arguments
from judge.flops import count_work
from profiling.device_metrics import result_from_records
from profiling.gpu_peaks import peaks_for
from profiling.ncu import diagnose, find_ncu
from profiling.ncu_parse import KernelRecord, ReportFormatError, records_from_csv
from profiling.sol import ncu_fractions, speed_of_light
from shared.observations import ProblemWork

NVTX = "sol_vs_ncu"
NCU_TIMEOUT_S = 300
WARMUP = 10
PCT = ".avg.pct_of_peak_sustained_elapsed"
# the same figure under the names ncu versions give it, the first one reported is read
DRAM_PCTS = (f"dram__throughput{PCT}", f"gpu__dram_throughput{PCT}")
SM_PCT = "sm__throughput" + PCT
TENSOR_PCTS = (f"sm__pipe_tensor_cycles_active{PCT}",
               f"sm__pipe_tensor_op_gmma_cycles_active{PCT}",
               f"sm__pipe_tensor_op_hmma_cycles_active{PCT}")
METRICS = (*DRAM_PCTS, SM_PCT, *TENSOR_PCTS, "gpu__compute_memory_throughput" + PCT,
           "gpu__time_duration.sum", "dram__bytes.sum", "dram__bytes_read.sum",
           "dram__bytes_write.sum", "dram__bytes.sum.peak_sustained",
           "dram__cycles_elapsed.avg.per_second", "sm__cycles_elapsed.avg.per_second",
           "gpc__cycles_elapsed.avg.per_second")
# metrics some GPUs or ncu versions lack (each figure is read under whichever name came back)
OPTIONAL = (*DRAM_PCTS, *TENSOR_PCTS)


# ---- the cases ---------------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    fn: Callable[..., torch.Tensor]
    make: Callable[[], list[torch.Tensor]]


def cases(copy_mb: int, n: int) -> list[Case]:
    elements = copy_mb * 2**20 // 4

    def floats(count: int) -> Callable[[], list[torch.Tensor]]:
        return lambda: [torch.randn(elements, device="cuda") for _ in range(count)]

    def matrices() -> list[torch.Tensor]:
        return [torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2)]

    return [
        Case(f"copy_fp32_{copy_mb}MB", torch.clone, floats(1)),
        Case(f"add_fp32_{copy_mb}MB", torch.add, floats(2)),
        Case(f"matmul_bf16_{n}", torch.mm, matrices),
    ]


class Exe:
    """The case as the judge holds a reference (``run`` returns the outputs)."""

    def __init__(self, fn: Callable[..., torch.Tensor]) -> None:
        self.fn = fn

    def run(self, args: Arguments) -> list[torch.Tensor]:
        with torch.no_grad():
            return [self.fn(*args.values)]


# ---- the estimate ------------------------------------------------------------------------------


def event_median_ms(fn: Callable[[], Any], samples: int) -> float:
    """Median of CUDA-event samples of ``fn``, the L2 flushed (zeroed) before each."""
    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 2**26)
    flush = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
    for _ in range(WARMUP):
        fn()
    times = []
    for _ in range(samples):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def work_of(fn: Callable[..., torch.Tensor], values: list[torch.Tensor]) -> ProblemWork:
    """The judge's count of ``fn``'s work on ``values``, as it counts a reference's."""
    exe, args = Exe(fn), Arguments(values)
    outputs = exe.run(args)
    return count_work(exe, args, outputs, writes_args=False,  # type: ignore[arg-type]
                      kernel_type="torch", device="cuda", sync=torch.cuda.synchronize)


def estimate(case: Case, samples: int, device: str) -> dict[str, Any]:
    values = case.make()
    work = work_of(case.fn, values)
    median = event_median_ms(lambda: case.fn(*values), samples)
    block = speed_of_light(device, median, work=work)
    return {"event_median_ms": median, "work": work.model_dump(mode="json"),
            "estimate": block.model_dump(mode="json")}


# ---- ncu ---------------------------------------------------------------------------------------


def target(case_name: str, copy_mb: int, n: int) -> None:
    """The process ncu profiles: the case warmed up outside the range, one call inside."""
    case = next(c for c in cases(copy_mb, n) if c.name == case_name)
    values = case.make()
    for _ in range(3):
        case.fn(*values)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(NVTX)
    case.fn(*values)
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()


def ncu_metrics(ncu: str, case: Case, options: argparse.Namespace) -> dict[str, Any]:
    """ncu's metrics of the case's one call in the range, or why there are none. Metrics this
    GPU or ncu does not have are dropped and the run tried again: those ncu names in its
    output, else (a message this script does not know) the optional ones all at once."""
    metrics = list(METRICS)
    last: dict[str, Any] = {"error": "ncu did not run"}
    for _ in range(len(OPTIONAL) + 1):
        command = [ncu, "--nvtx", "--nvtx-include", f"{NVTX}/", "--target-processes", "all",
                   "--clock-control", options.clock_control, "--cache-control", "all",
                   "--section", "SpeedOfLight", "--metrics", ",".join(metrics),
                   "--csv", "--page", "raw", "--print-units", "base",
                   sys.executable, str(Path(__file__).resolve()), "--target", case.name,
                   "--copy-mb", str(options.copy_mb), "--matmul-n", str(options.matmul_n)]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (str(ROOT), str(ROOT / "client"), os.environ.get("PYTHONPATH")) if p))
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env, start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=NCU_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {"error": f"ncu ran past {NCU_TIMEOUT_S} s", "command": " ".join(command)}
        log = stdout + "\n" + stderr
        try:
            records = records_from_csv(stdout)
        except ReportFormatError:
            records = []
        if records:
            return {"records": records, "command": " ".join(command), "metrics": metrics}
        reason = diagnose(log, proc.returncode, False) or "ncu reported no kernel"
        last = {"error": reason, "command": " ".join(command), "log_tail": log[-3000:]}
        if "ERR_NVGPUCTRPERM" in log:
            return last
        refused = [m for m in metrics if m in log] or [m for m in metrics if m in OPTIONAL]
        if not refused:
            return last
        metrics = [m for m in metrics if m not in refused]
    return last


def ncu_figures(records: list[KernelRecord], dtype: str | None) -> dict[str, Any]:
    """What ncu measured of the range's longest kernel (the range holds one in these cases),
    and the exact block fractions :func:`profiling.sol.ncu_fractions` reads from its
    speed-of-light section."""
    first = max(records, key=lambda r: r.number("gpu__time_duration.sum") or 0.0)
    tensor = next(((m, first.number(m)) for m in TENSOR_PCTS if first.number(m) is not None),
                  (None, None))
    dram = next(((m, first.number(m)) for m in DRAM_PCTS if first.number(m) is not None),
                (None, None))
    peak_per_cycle = first.number("dram__bytes.sum.peak_sustained")
    dram_hz = first.number("dram__cycles_elapsed.avg.per_second")
    figures: dict[str, Any] = {
        "kernels": [r.name for r in records],
        "duration_ms": _ms(first.number("gpu__time_duration.sum")),
        "dram_throughput_metric": dram[0], "dram_throughput_pct": dram[1],
        "sm_throughput_pct": first.number(SM_PCT),
        "tensor_pipe_metric": tensor[0], "tensor_pipe_pct": tensor[1],
        "dram_bytes": first.number("dram__bytes.sum"),
        "dram_peak_gb_s": peak_per_cycle * dram_hz / 1e9
        if peak_per_cycle is not None and dram_hz is not None else None,
        "sm_clock_hz": first.number("sm__cycles_elapsed.avg.per_second")
        or first.number("gpc__cycles_elapsed.avg.per_second"),
        "dram_clock_hz": dram_hz,
    }
    exact = ncu_fractions(result_from_records(records), dtype)
    figures["block_fractions"] = exact.model_dump(mode="json") if exact is not None else None
    return figures


def _ms(seconds: float | None) -> float | None:
    return seconds * 1e3 if seconds is not None else None


# ---- the comparison ----------------------------------------------------------------------------


def _clock(ncu: dict[str, Any], highest_mhz: float | None) -> tuple[float, float] | None:
    """The SM clock ncu saw the call run at, beside the GPU's highest (nvidia-smi's)."""
    hz = ncu.get("sm_clock_hz")
    return (hz / 1e6, highest_mhz) if hz and highest_mhz else None


def compare(row: dict[str, Any], device: str, highest_mhz: float | None = None) -> None:
    """The estimate's fractions beside ncu's, and their ratios, into ``row``."""
    est, ncu = row.get("estimate"), row.get("ncu")
    if not est or not ncu or "error" in ncu:
        return
    pairs = {"memory": (est["memory_fraction"], _frac(ncu["dram_throughput_pct"])),
             "compute": (est["compute_fraction"], _frac(ncu["tensor_pipe_pct"]))}
    pairs_at: dict[str, float | None] = {}
    if ncu["duration_ms"]:
        # the same estimate at ncu's own duration of the call: only the peaks differ then
        at_ncu = speed_of_light(device, ncu["duration_ms"],
                                work=ProblemWork.model_validate(row["work"]),
                                sm_clock_mhz=_clock(ncu, highest_mhz))
        pairs_at = {"memory": at_ncu.memory_fraction, "compute": at_ncu.compute_fraction}
    row["comparison"] = {
        kind: {"estimated": e, "ncu": n, "ratio": _ratio(e, n),
               "estimated_at_ncu_duration": pairs_at.get(kind),
               "ratio_at_ncu_duration": _ratio(pairs_at.get(kind), n)}
        for kind, (e, n) in pairs.items()}
    row["dominant"] = est["bound"]


def _frac(pct: float | None) -> float | None:
    return pct / 100.0 if pct is not None else None


def _ratio(estimated: float | None, measured: float | None) -> float | None:
    return estimated / measured if estimated is not None and measured else None


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'case':22s} {'bound':8s} {'median ms':>10s} {'ncu ms':>8s} "
            f"{'mem est':>8s} {'mem ncu':>8s} {'ratio':>6s}  {'cmp est':>8s} {'cmp ncu':>8s} "
            f"{'ratio':>6s}")
    lines = [head, "-" * len(head)]
    for row in rows:
        if "error" in row and "estimate" not in row:
            lines.append(f"{row['case']:22s} failed: {row['error'][:100]}")
            continue
        cmp_ = row.get("comparison") or {}
        mem, comp = cmp_.get("memory", {}), cmp_.get("compute", {})
        ncu = row.get("ncu") or {}
        lines.append(
            f"{row['case']:22s} {row['estimate']['bound'] or '-':8s} "
            f"{row['event_median_ms']:10.4f} {_f(ncu.get('duration_ms'), 8, 4)} "
            f"{_f(row['estimate']['memory_fraction'], 8)} {_f(mem.get('ncu'), 8)} "
            f"{_f(mem.get('ratio'), 6)}  {_f(row['estimate']['compute_fraction'], 8)} "
            f"{_f(comp.get('ncu'), 8)} {_f(comp.get('ratio'), 6)}")
        if "error" in ncu:
            lines.append(f"{'':22s} ncu: {ncu['error'][:160]}")
    return "\n".join(lines)


def gpu_facts() -> dict[str, Any]:
    """The GPU's SMs and L2, and its clocks as nvidia-smi reports them (when it can): what a
    ratio away from 1 is read against (a datasheet's tensor rate assumes its boost clock)."""
    props = torch.cuda.get_device_properties(0)
    facts: dict[str, Any] = {"sm_count": props.multi_processor_count,
                             "l2_bytes": getattr(props, "L2_cache_size", None),
                             "memory_bytes": props.total_memory}
    query = "clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.limit,driver_version"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader",
                              "-i", "0"], capture_output=True, text=True, timeout=30,
                             check=False)
        facts["nvidia_smi"] = dict(zip(query.split(","), (v.strip() for v in
                                                         out.stdout.split(","))))
    except (OSError, subprocess.SubprocessError) as exc:
        facts["nvidia_smi"] = f"n/a ({exc})"
    return facts


def _highest_sm_mhz(gpu: dict[str, Any]) -> float | None:
    smi = gpu.get("nvidia_smi") if isinstance(gpu, dict) else None
    try:
        return float(str(smi["clocks.max.sm"]).split()[0]) if isinstance(smi, dict) else None
    except (KeyError, ValueError, IndexError):
        return None


def _safely(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a fact the report can do without
        return {"error": f"{type(exc).__name__}: {exc}"}


def write(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as f:
        json.dump(report, f, indent=1, default=str)
    os.replace(f.name, path)


def _f(value: float | None, width: int, digits: int = 3) -> str:
    return f"{value:{width}.{digits}f}" if isinstance(value, (int, float)) else f"{'n/a':>{width}s}"


# ---- main --------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?", help="where to write the JSON")
    parser.add_argument("--copy-mb", type=int, default=256)
    parser.add_argument("--matmul-n", type=int, default=8192)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--clock-control", choices=("none", "base"), default="none")
    parser.add_argument("--ncu", default="ncu", help="the ncu executable (a path or a name)")
    parser.add_argument("--no-ncu", action="store_true")
    parser.add_argument("--target", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.target:
        target(options.target, options.copy_mb, options.matmul_n)
        return 0
    if options.out is None:
        parser.error("give the path of the JSON to write")
    if not torch.cuda.is_available():
        print("no CUDA GPU here", file=sys.stderr)
        return 2
    device = torch.cuda.get_device_name(0)
    ncu = None if options.no_ncu else find_ncu(options.ncu)
    peaks = peaks_for(device)
    report: dict[str, Any] = {
        "device": device, "table_row": peaks.row if peaks else None,
        "torch": torch.__version__, "cuda": torch.version.cuda, "host": platform.node(),
        "gpu": _safely(gpu_facts),
        "ncu": ncu, "clock_control": options.clock_control, "samples": options.samples,
        "metric_meaning": {
            "memory": f"{DRAM_PCTS[0]} (or {DRAM_PCTS[1]}): DRAM bytes/s over the DRAM's "
                      "peak, over the kernel's duration",
            "compute": f"{TENSOR_PCTS[0]} (or the gmma/hmma pipe's): the tensor pipe's busy "
                       "share of the kernel's cycles = tensor FLOP/s over the peak at that clock",
        },
        "rows": [],
    }
    for case in cases(options.copy_mb, options.matmul_n):
        row: dict[str, Any] = {"case": case.name}
        try:
            row.update(estimate(case, options.samples, device))
        except Exception:  # noqa: BLE001 - write it down and go on
            row["error"] = traceback.format_exc()[-2000:]
        torch.cuda.empty_cache()
        if ncu is None:
            row["ncu"] = {"error": "ncu not run" if options.no_ncu else "ncu was not found"}
        else:
            try:
                got = ncu_metrics(ncu, case, options)
                dtype = (row.get("work") or {}).get("dtype")
                row["ncu"] = ncu_figures(got["records"], dtype) | {"command": got["command"]} \
                    if "records" in got else got
            except Exception:  # noqa: BLE001
                row["ncu"] = {"error": traceback.format_exc()[-2000:]}
        compare(row, device, _highest_sm_mhz(report["gpu"]))
        report["rows"].append(row)
        write(options.out, report)  # each case as it finishes: a run cut short keeps them
        print(json.dumps({"case": case.name, "comparison": row.get("comparison")}), flush=True)
    print(table(report["rows"]))
    print(f"written: {options.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
