"""What the timer's independent measures say about a short kernel timed with few samples.

For num_trials 1, 2, 5 and 100, the raw report's event median, host-synchronised samples and
CUPTI device-busy figure of a 64x64 addmm (two kernels per call), and how many activity
records CUPTI delivers for 1, 2, 3 and 10 traced calls. Run on a GPU host:

    python3 scripts/probe_few_samples.py [--out probe.json]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from harness import device_checks
from harness import timer as timer_mod


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    timer = timer_mod.bind("cuda")
    a, b = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")

    def fn() -> torch.Tensor:
        return torch.addmm(torch.ones(1, device=a.device), a, b)

    rows = []
    for samples in (1, 2, 5, 100):
        for _ in range(args.repeats):
            raw = timer.run(fn, samples, None)
            rows.append({"samples": samples, "event_median_ms": statistics.median(raw.event_ms),
                         "host_sync_ms": raw.host_sync_ms, "device_busy_ms": raw.device_busy_ms,
                         "device_busy_calls": raw.device_busy_calls})
            print(json.dumps(rows[-1]), flush=True)
    tracer = device_checks.ActivityTracer.start()
    records = []
    for calls in (1, 2, 3, 10):
        for _ in range(3):
            got = tracer.trace(fn, calls, torch.cuda.synchronize)
            records.append({"calls": calls, "records": len(got)})
            print(json.dumps(records[-1]), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"timer": rows, "activity_records": records}, f, indent=1)


if __name__ == "__main__":
    main()
