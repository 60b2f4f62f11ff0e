"""What a fresh job process pays on a GPU host, outside the server: (a) the time from SIGKILL
until the process is reaped (its CUDA context torn down), by what the process held; (b) the
first and second call of common torch ops in a fresh process, cold and after warming cuBLAS.

    python scripts/probe_worker_costs.py [--out FILE]

Diagnostics for issue 26 (docs/ENGINE.md, "The floor per job"); prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HOLD = {
    "context only": "torch.zeros(1, device='cuda')",
    "context + 2 GB": "x = torch.empty(2 << 30, dtype=torch.uint8, device='cuda'); x.fill_(1)",
    "context + cuBLAS": "a = torch.randn(1024, 1024, device='cuda'); (a @ a).sum().item()",
    "context + 2 GB + cuBLAS": ("x = torch.empty(2 << 30, dtype=torch.uint8, device='cuda'); "
                                "x.fill_(1); a = torch.randn(1024, 1024, device='cuda'); "
                                "(a @ a).sum().item()"),
}
CHILD = ("import sys, time, torch\n{hold}\ntorch.cuda.synchronize()\n"
         "sys.stdout.write('ready\\n'); sys.stdout.flush()\ntime.sleep(600)\n")

OPS = {
    "relu 8192^2": ("torch.randn(8192, 8192, device='cuda')", "torch.relu(x)"),
    "softmax 4096x8192": ("torch.randn(4096, 8192, device='cuda')", "torch.softmax(x, dim=-1)"),
    "matmul fp32 2048^2": ("torch.randn(2048, 2048, device='cuda')", "x @ x"),
    "matmul fp16 4096^2": ("torch.randn(4096, 4096, device='cuda').half()", "x @ x"),
    "layer_norm 8192x4096": ("torch.randn(8192, 4096, device='cuda')",
                             "torch.layer_norm(x, x.shape[-1:])"),
    "cumsum 4096^2": ("torch.randn(4096, 4096, device='cuda')", "x.cumsum(dim=1)"),
    "avg_pool2d": ("torch.randn(32, 64, 256, 256, device='cuda')",
                   "torch.nn.functional.avg_pool2d(x, 2)"),
}
WARM = ("for dt in (torch.float32, torch.float16, torch.bfloat16):\n"
        "    w = torch.randn(64, 64, device='cuda', dtype=dt); (w @ w).sum().item()\n")
FIRST = """import json, sys, time, torch
torch.zeros(1, device='cuda'); torch.cuda.synchronize()
t = time.perf_counter()
{warm}
torch.cuda.synchronize()
warm_ms = (time.perf_counter() - t) * 1e3
out = {{"warm_ms": warm_ms}}
for name, (make, call) in {ops}.items():
    x = eval(make); torch.cuda.synchronize()
    times = []
    for _ in range(3):
        t = time.perf_counter(); eval(call); torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    out[name] = [round(v, 3) for v in times]
print(json.dumps(out))
"""


def exit_ms(hold: str, repeats: int, env: dict[str, str] | None = None) -> list[float]:
    times = []
    for _ in range(repeats):
        proc = subprocess.Popen([sys.executable, "-c", CHILD.format(hold=hold)],
                                stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        t = time.perf_counter()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        times.append(round((time.perf_counter() - t) * 1e3, 1))
    return times


def first_calls(warm: bool, env: dict[str, str]) -> dict[str, object]:
    code = FIRST.format(warm=WARM if warm else "pass", ops=repr(OPS))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300, check=False)
    if done.returncode != 0:
        return {"error": done.stderr[-500:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--settings", action="store_true",
                        help="with --exit-only: also by environment setting")
    parser.add_argument("--exit-only", action="store_true",
                        help="only the exit after SIGKILL, by setting, beside idle contexts")
    args = parser.parse_args()
    if args.exit_only:
        exits(args)
        return
    result: dict[str, object] = {"exit_after_sigkill_ms": {}, "first_calls_ms": {}}
    for name, hold in HOLD.items():
        times = exit_ms(hold, args.repeats)
        result["exit_after_sigkill_ms"][name] = {  # type: ignore[index]
            "median": statistics.median(times), "all": times}
    for label, warm, env in (("cold", False, {}), ("cuBLAS warmed", True, {}),
                             ("cold, eager module loading", False,
                              {"CUDA_MODULE_LOADING": "EAGER"})):
        result["first_calls_ms"][label] = first_calls(warm, env)  # type: ignore[index]
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


SETTINGS = {
    "default": {},
    "CUDA_DEVICE_MAX_CONNECTIONS=1": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
    "PYTORCH_NO_CUDA_MEMORY_CACHING=1": {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"},
}


HARNESS = {
    "context + cuBLAS": "",
    "+ CUPTI activity started": ("from harness.device_checks import ActivityTracer; "
                                 "ActivityTracer.start()"),
    "+ the harness's timer bound and warmed": (
        "from harness.timer import bind; t = bind('cuda'); t.warm_up(lambda: a @ a)"),
    "+ timer, CUPTI off": (
        "import harness.device_checks as hd, harness.timer as ht; "
        "hd.ActivityTracer._start = classmethod(lambda cls: cls()); t = ht.bind('cuda'); "
        "t.warm_up(lambda: a @ a)"),
}


def exits(args: argparse.Namespace) -> None:
    """The exit after SIGKILL of a process holding a context and cuBLAS, by setting, alone
    on the GPU and then beside 6 idle contexts (a server's spares); then, beside 6, by what
    of the harness the process started."""
    hold = HOLD["context + cuBLAS"]
    result: dict[str, object] = {}
    idle = [subprocess.Popen([sys.executable, "-c", CHILD.format(hold=HOLD["context only"])],
                             stdout=subprocess.PIPE, text=True) for _ in range(6)]
    for proc in idle:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    for name, extra in HARNESS.items():
        times = exit_ms(hold + "\n" + extra, args.repeats)
        result[f"{name}, 6 contexts beside"] = {"median": statistics.median(times), "all": times}
        print(name, times, flush=True)
    for proc in idle:
        proc.kill()
        proc.wait()
    for beside in (0, 6) if args.settings else ():
        idle = [subprocess.Popen([sys.executable, "-c", CHILD.format(hold=HOLD["context only"])],
                                 stdout=subprocess.PIPE, text=True) for _ in range(beside)]
        for proc in idle:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        for name, env in SETTINGS.items():
            times = exit_ms(hold, args.repeats, env)
            result[f"{name}, {beside} contexts beside"] = {
                "median": statistics.median(times), "all": times}
            print(name, beside, times, flush=True)
        for proc in idle:
            proc.kill()
            proc.wait()
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
