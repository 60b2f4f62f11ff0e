"""Does the timer's CUPTI measure see a multi-stream call? (GPU host probe)

    python scripts/probe_cupti_streams.py

Binds the worker's timer (harness.timer.bind, as a worker does before user code), then
times a one-kernel call and the honest corpus case ``multi_streams_joined`` (two halves on two
streams, joined) and prints, per call: the event median, CUPTI's busy time per call and the
host-synchronised median. On the H100 the second once came back with CUPTI busy 0.0 ms.
"""

from __future__ import annotations

import json
import statistics

import torch

from harness import timer


def main() -> None:
    bound = timer.bind("cuda")
    n = 1 << 22
    x = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    side = torch.cuda.Stream()

    def one() -> None:
        torch.mul(torch.exp(x), 0.5, out=out)

    def two_streams() -> None:
        main = torch.cuda.current_stream()
        half = n // 2
        side.wait_stream(main)
        with torch.cuda.stream(side):
            torch.mul(torch.exp(x[half:]), 0.5, out=out[half:])
        torch.mul(torch.exp(x[:half]), 0.5, out=out[:half])
        main.wait_stream(side)

    report = {}
    for name, fn in (("one_stream", one), ("two_streams", two_streams), ("one_again", one)):
        raw = bound.run(fn, None, None)
        report[name] = {"event_median_ms": statistics.median(raw.event_ms),
                        "device_busy_ms": raw.device_busy_ms,
                        "device_busy_error": raw.device_busy_error,
                        "host_median_ms": statistics.median(raw.host_sync_ms)}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
