#!/usr/bin/env bash
# Capture real Nsight Compute reports for tests/profiling (run on a GPU host with ncu).
#
#   bash scripts/capture_ncu_fixture.sh [PRESET]        (PRESET: full (default), basic, or sections)
#
# For a small torch kernel (relu) and a small Triton kernel (vector add) it profiles one call
# through profiling/ncu_target.py exactly as the server does (profiling.ncu.build_command:
# NVTX range, free clocks), then saves into tests/profiling/fixtures/:
#   ncu_<case>.ncu-rep   the report
#   ncu_<case>.csv       ncu --import <report> --csv --page raw --print-units base
# parses both back with profiling/ncu_parse.py and prints which category keys came out. On
# success it removes the hand-made stand-in ncu_raw_handmade.csv (KEEP_HANDMADE=1 keeps it).
# With $OUT set (the GPU `run` tool), the files are also copied to $OUT to come back.
# Environment: PYTHON (default python3), NCU_PATH (default: ncu on PATH or a CUDA install).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
PRESET=${1:-full}
DEST=tests/profiling/fixtures
WORK=$(mktemp -d /tmp/capture_ncu.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export PYTHONPATH="$PWD:$PWD/client${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$DEST"

"$PYTHON" - "$WORK" "$DEST" "$PRESET" <<'PYEOF'
import subprocess, sys
from pathlib import Path

from io_contract import IOContractBuilder, create_randn_spec
from profiling.device_metrics import result_from_records
from profiling.ncu import build_command, find_ncu, target_argv
from profiling.ncu_parse import records_from_csv
from shared.models import KernelCode, WorkerJob
from shared.settings import Settings

work, dest, preset = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
ncu = find_ncu(Settings.from_env().ncu_path)
if ncu is None:
    sys.exit("ncu not found: put it on PATH or set NCU_PATH")
print("ncu:", ncu, subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1])

N = 1 << 20
relu_io = IOContractBuilder().add_input_tensor("x", create_randn_spec([N], seed=1)).build()
add_io = (IOContractBuilder()
          .add_input_tensor("x", create_randn_spec([N], seed=1))
          .add_input_tensor("y", create_randn_spec([N], seed=2))
          .add_output_tensor("out", [N])
          .add_scalar("n", "int", N)
          .add_meta_param("BLOCK_SIZE", 1024)
          .build()).model_dump()
add_io["launch"] = {"grid": {"x": "cdiv(n, BLOCK_SIZE)"}, "num_warps": 4}
CASES = {
    "torch_relu": KernelCode(
        source_code="class Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n",
        kernel_type="torch", io=relu_io),
    "triton_add": KernelCode(
        source_code=(
            "import triton\nimport triton.language as tl\n\n@triton.jit\n"
            "def add_kernel(x, y, out, n, BLOCK_SIZE: tl.constexpr):\n"
            "    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)\n"
            "    mask = offs < n\n"
            "    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)\n"),
        kernel_type="triton", io=add_io),
}
failed = 0
for case, kernel in CASES.items():
    job = WorkerJob(job_id=case, kind="evaluate", kernel=kernel, device="cuda",
                    work_dir=str(work / case), cache_dir=str(work / "cache"))
    request = work / f"{case}.json"
    request.write_text(job.model_dump_json())
    report = dest / f"ncu_{case}.ncu-rep"
    command = build_command(ncu, preset, report, False, target_argv(sys.executable, request, "kernel"))
    print("\n$", " ".join(command), flush=True)
    done = subprocess.run(command, capture_output=True, text=True)
    print(done.stdout[-3000:], done.stderr[-3000:])
    if done.returncode != 0 or not report.exists():
        print(f"FAILED: {case}: ncu exited {done.returncode}")
        failed += 1
        continue
    csv_path = dest / f"ncu_{case}.csv"
    export = subprocess.run([ncu, "--import", str(report), "--csv", "--page", "raw",
                             "--print-units", "base"], capture_output=True, text=True)
    if export.returncode != 0:
        print(f"FAILED: {case}: ncu --import exited {export.returncode}: {export.stderr[-2000:]}")
        failed += 1
        continue
    csv_path.write_text(export.stdout)
    records = records_from_csv(export.stdout)
    result = result_from_records(records, preset=preset)
    print(f"{case}: {len(records)} kernel(s): {[r.name[:60] for r in records]}; "
          f"{len(records[0].metrics) if records else 0} metrics; report {report.stat().st_size} B, "
          f"csv {csv_path.stat().st_size} B")
    for category in ("speed_of_light", "detailed_metrics", "memory_metrics", "compute_metrics",
                     "pipeline_metrics", "occupancy_metrics", "stall_metrics", "scheduler_metrics",
                     "access_pattern_metrics", "roofline_metrics", "timing_metrics"):
        print(f"  {category}: {sorted(getattr(result, category))}")
    try:
        from profiling.ncu_parse import records_from_report
        from_rep = records_from_report(report)
        print(f"  ncu_report reads {len(from_rep)} kernel(s), {len(from_rep[0].metrics) if from_rep else 0} metrics")
    except ImportError:
        print("  (ncu_report not importable here: only the CSV reader was checked)")
sys.exit(1 if failed else 0)
PYEOF

if [ "${KEEP_HANDMADE:-0}" != 1 ]; then
    rm -f "$DEST/ncu_raw_handmade.csv"
fi
if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT"
    cp "$DEST"/ncu_*.csv "$DEST"/ncu_*.ncu-rep "$OUT"/
fi
ls -l "$DEST"
