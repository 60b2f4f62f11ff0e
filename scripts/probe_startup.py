"""Where a fresh GPU worker's start-up time goes: CUDA context, CUPTI tracer, torch profiler.

    python3 scripts/probe_startup.py
"""

from __future__ import annotations

import time

t0 = time.perf_counter()
import torch

t1 = time.perf_counter()
torch.cuda.init()
torch.empty(1, device="cuda")
t2 = time.perf_counter()
from harness import timer

bound = timer.bind("cuda")
t3 = time.perf_counter()
x = torch.randn(4096, 4096, device="cuda")
raw = bound.run(lambda: x @ x, 20, None)
t4 = time.perf_counter()
print(f"import torch {1e3 * (t1 - t0):.0f} ms; context {1e3 * (t2 - t1):.0f} ms; "
      f"timer.bind (CUPTI) {1e3 * (t3 - t2):.0f} ms; 20 timed matmuls {1e3 * (t4 - t3):.0f} ms")
print("event median", sorted(raw.event_ms)[10], "busy", raw.device_busy_ms, raw.device_busy_error)
import torch.profiler

t5 = time.perf_counter()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
    (x @ x).sum().item()
t6 = time.perf_counter()
print(f"first torch.profiler (kineto) session {1e3 * (t6 - t5):.0f} ms")
