"""Which L2 flush makes a short memory-bound kernel's event time match Nsight Compute's.

A flush that *writes* twice the L2 leaves it full of dirty lines; the timed kernel then pays
for writing them back. Prints, per kernel, the median event time after: a zeroing flush
(triton's do_bench), a zeroing flush followed by a read pass (L2 left clean), a read pass
alone, and no flush; and triton's do_bench. Run on the GPU host:

    python3 scripts/probe_flush.py
"""

from __future__ import annotations

import json
import statistics

import torch


def main() -> None:
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 0)) or 64 * 2**20
    flush = torch.empty(2 * l2 // 4, dtype=torch.int32, device="cuda")
    a16 = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
    x5 = torch.randn(1 << 20, device="cuda")
    x50 = torch.randn(1 << 22, device="cuda")
    y50 = torch.randn(1 << 22, device="cuda")
    kernels = {
        "relu_4MB (~5 us)": lambda: torch.relu(x5),
        "add_16MB (~50 us)": lambda: x50 + y50,
        "matmul_fp16_2048": lambda: a16 @ a16,
    }
    flushes = {
        "zero": lambda: flush.zero_(),
        "zero+read": lambda: (flush.zero_(), flush.sum()),
        "read": lambda: flush.sum(),
        "none": lambda: None,
    }
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rows = {}
    for name, fn in kernels.items():
        for _ in range(20):
            fn()
        row = {}
        for fname, fl in flushes.items():
            times = []
            for _ in range(200):
                fl()
                torch.cuda.synchronize()
                torch.cuda._sleep(1_000_000)
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end))
            row[fname] = round(statistics.median(times) * 1e3, 2)
        try:
            import triton.testing

            row["do_bench"] = round(triton.testing.do_bench(fn, warmup=50, rep=300,
                                                            return_mode="median") * 1e3, 2)
        except Exception as exc:  # noqa: BLE001
            row["do_bench"] = str(exc)
        rows[name] = row
        print(name, json.dumps(row), "(us)", flush=True)


if __name__ == "__main__":
    main()
