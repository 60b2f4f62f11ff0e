# mypy: ignore-errors
# ruff: noqa
"""Probe: a cuBLAS fp16 2048 matmul and a 12M add timed with the L2 flush as the timer does it, with
none, with a write flush, with the inputs' pages touched after it, two calls per interval; ncu
beside, with and without its cache control and clock control. Results:
bench/results/judge_h100_2026-11-26e/matmul_flush_2.log. A probe, not a test."""
import json, statistics, subprocess, sys, os, tempfile
sys.path.insert(0, os.getcwd())
import torch
from harness.timer import bind
from profiling.ncu import find_ncu
timer = bind("cuda")
a = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
b = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
x = torch.randn(12 << 20, device="cuda"); y = torch.randn(12 << 20, device="cuda")
big = torch.empty(256 << 20, device="cuda", dtype=torch.int8)
mm = lambda: a @ b
add = lambda: torch.add(x, y)
def touch_mm():
    a.view(-1)[::16384].sum(); b.view(-1)[::16384].sum()
def run(fn, pre, n=200, calls=1):
    for _ in range(3): fn()
    timer.sync(); out = []
    def many():
        for _ in range(calls): fn()
    for _ in range(n):
        pre(); timer.sync()
        out.append(timer.sample(many if calls > 1 else fn, flush=False)[0] * 1e3)
    return round(statistics.median(out), 3)
res = {}
for name, fn in [("mm", mm), ("add", add)]:
    res[name] = {
      "read_flush": run(fn, timer.flush),
      "no_flush": run(fn, lambda: None),
      "write_flush": run(fn, lambda: big.zero_()),
      "read_flush_touch": run(fn, lambda: (timer.flush(), touch_mm())) if name == "mm" else None,
      "read_flush_x2": run(fn, timer.flush, calls=2),
      "no_flush_x2": run(fn, lambda: None, calls=2),
      "nothing": run(lambda: None, timer.flush),
    }
    print(name, json.dumps(res[name]), flush=True)
ncu = find_ncu("ncu")
script = '''import torch,sys
a = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
b = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
x = torch.randn(12 << 20, device="cuda"); y = torch.randn(12 << 20, device="cuda")
fn = (lambda: a @ b) if sys.argv[1] == "mm" else (lambda: torch.add(x, y))
for _ in range(3): fn()
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("r")
for _ in range(5): fn()
torch.cuda.synchronize()
torch.cuda.nvtx.range_pop()
'''
p = tempfile.mktemp(suffix=".py"); open(p, "w").write(script)
for name in ["mm", "add"]:
    for cc in ["all", "none"]:
        for clk in ["none", "base"]:
            r = subprocess.run([ncu, "--nvtx", "--nvtx-include", "r/", "--metrics", "gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second", "--csv", "--clock-control", clk, "--cache-control", cc, sys.executable, p, name], capture_output=True, text=True)
            vals = [l for l in r.stdout.splitlines() if "gpu__time_duration" in l or "per_second" in l]
            print(name, cc, clk, [v.split('","')[-1] for v in vals], flush=True)
