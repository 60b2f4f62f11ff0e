# mypy: ignore-errors
# ruff: noqa
"""Probe: what runs just before a timed call moves its events (the flush's reduction, a one-element
kernel, the same kernel on other data, nothing), the events less the timer's zero beside ncu, for
fp16 matmuls of 2048 and 4096 and a 12M add. Results:
bench/results/judge_h100_2026-11-26e/matmul_neighbour_5.log. A probe, not a test."""
import json, statistics, subprocess, sys, os, tempfile
sys.path.insert(0, os.getcwd())
import torch
from harness.timer import bind
from profiling.ncu import find_ncu
timer = bind("cuda")
def mats(n): return (torch.randn(n, n, device="cuda", dtype=torch.float16), torch.randn(n, n, device="cuda", dtype=torch.float16))
a, b = mats(2048); c, d = mats(4096)
x = torch.randn(12 << 20, device="cuda"); y = torch.randn(12 << 20, device="cuda")
half = torch.zeros(16 << 20, dtype=torch.int32, device="cuda")  # 64 MB = 1.3x L2
tiny = torch.empty(1, device="cuda")
cases = {"mm2048": lambda: a @ b, "mm4096": lambda: c @ d, "add": lambda: torch.add(x, y)}
def run(fn, pre, n=200):
    for _ in range(3): fn()
    timer.warm_up(fn)
    out = []
    for _ in range(n):
        pre(); timer.sync()
        out.append(timer.sample(fn, flush=False)[0] * 1e3)
    return round(statistics.median(out) - timer.event_zero_ms * 1e3, 3)
pres = {
  "read_flush": timer.flush,
  "read_flush_64MB": lambda: half.sum(),
  "read_flush_then_tiny": lambda: (timer.flush(), tiny.zero_()),
  "read_flush_then_same_kernel_on_other_data": None,
  "no_flush": lambda: None,
}
res = {}
for name, fn in cases.items():
    row = {}
    for pname, pre in pres.items():
        if pre is None:
            if name.startswith("mm"):
                e, f = mats(int(name[2:]))
                pre = lambda: (timer.flush(), e @ f)  # same kernel just before, cold own inputs
            else:
                continue
        row[pname] = run(fn, pre)
    row["zero_us"] = round(timer.event_zero_ms * 1e3, 3)
    res[name] = row
    print(name, json.dumps(row), flush=True)
ncu = find_ncu("ncu")
script = '''import torch,sys
n = {"mm2048": 2048, "mm4096": 4096}.get(sys.argv[1])
if n:
    a = torch.randn(n, n, device="cuda", dtype=torch.float16); b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    fn = lambda: a @ b
else:
    x = torch.randn(12 << 20, device="cuda"); y = torch.randn(12 << 20, device="cuda")
    fn = lambda: torch.add(x, y)
for _ in range(3): fn()
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("r")
for _ in range(9): fn()
torch.cuda.synchronize()
torch.cuda.nvtx.range_pop()
'''
p = tempfile.mktemp(suffix=".py"); open(p, "w").write(script)
for name in cases:
    r = subprocess.run([ncu, "--nvtx", "--nvtx-include", "r/", "--metrics", "gpu__time_duration.sum", "--csv", "--clock-control", "none", "--cache-control", "all", sys.executable, p, name], capture_output=True, text=True)
    vals = [float(l.split('","')[-1].strip('"').replace(",", "")) / 1e3 for l in r.stdout.splitlines() if "gpu__time_duration" in l]
    print(name, "ncu_us median", statistics.median(vals) if vals else r.stderr[-300:], vals, flush=True)
