"""Where the CUDA events' interval exceeds the kernel's own duration, per kernel, on this GPU.

    python scripts/probe_event_gap.py [--samples 100] [--ncu] [--out FILE]

For each of bench/timing_rigour.py's kernels (full size) it takes samples exactly as the
server's timer does (L2 flush, sync, stream held, event, call, event, released, sync), and for
each sample the CUPTI activity records of that sample alone (flushed after it), and prints per
kernel the medians of

- ``events``: the events' interval, CUPTI off, then on (what tracing costs the interval);
- ``span``: the first record's start to the last record's end (the call's GPU work, the gaps
  between its kernels included, the events' own entry and exit excluded);
- ``union`` and ``sum``: the records' union and plain sum (``sum`` is what ncu's
  ``gpu__time_duration.sum`` over the call counts); ``kernels``: records per call;
- with ``--ncu``, ncu's figure per call (bench/timing_rigour.py's method).

Also the events around nothing and around an empty kernel. A probe, not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--ncu", action="store_true")
    parser.add_argument("--only", default="")
    parser.add_argument("--out", default="")
    args = parser.parse_args()

    import timing_rigour as tr
    import torch
    from cupti import cupti

    from harness.device_checks import ActivityTracer
    from harness.timer import bind
    from profiling.ncu import find_ncu

    timer = bind("cuda")
    tracer = ActivityTracer.start()
    if tracer.error:
        print("no CUPTI:", tracer.error)
        return 1
    kinds = [cupti.ActivityKind.CONCURRENT_KERNEL, cupti.ActivityKind.MEMCPY,
             cupti.ActivityKind.MEMSET]
    records = tracer.records
    tools = (timer, cupti, kinds, records)

    rows = []
    empty = torch.empty(1, device="cuda")
    for name, fn in [("nothing", lambda: None), ("empty_kernel", lambda: empty.zero_())]:
        rows.append({"kernel": name, "off": sampled(*tools, fn, args.samples, False),
                     "on": sampled(*tools, fn, args.samples, True)})
        print(json.dumps(rows[-1]), flush=True)
    ncu = find_ncu("ncu") if args.ncu else None
    with tempfile.TemporaryDirectory() as tmp:
        for case in tr.cases(quick=False):
            key = f"{case.kernel_type}:{case.name}"
            if args.only and not any(part in key for part in args.only.split(",")):
                continue
            script = tr.write_script(case, Path(tmp))
            fn = tr.load_make(script)()
            row: dict[str, Any] = {"kernel": key, "off": sampled(*tools, fn, args.samples, False),
                   "on": sampled(*tools, fn, args.samples, True),
                   "off_again": sampled(*tools, fn, args.samples, False)}
            if ncu:
                row["ncu_us"] = tr.ncu_ms(script, ncu, 120)
                if isinstance(row["ncu_us"], float):
                    row["ncu_us"] = round(row["ncu_us"] * 1e3, 3)
            del fn
            torch.cuda.empty_cache()
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


def sampled(timer, cupti, kinds, records, fn, n: int, traced: bool) -> dict:
    from harness.device_checks import union_ns

    events, spans, unions, sums, counts = [], [], [], [], []
    for _ in range(3):
        fn()
    timer.sync()
    if traced:
        cupti.activity_flush_all(1)
        for kind in kinds:
            cupti.activity_enable(kind)
    try:
        for _ in range(n):
            timer.flush()
            timer.sync()
            if traced:
                cupti.activity_flush_all(1)
                records.clear()
            ms, _ = timer.sample(fn, flush=False)
            events.append(ms * 1e3)
            if traced:
                cupti.activity_flush_all(1)
                got = sorted(records)
                counts.append(len(got))
                if got:
                    spans.append((max(e for _, e in got) - got[0][0]) / 1e3)
                    unions.append(union_ns(got) / 1e3)
                    sums.append(sum(e - s for s, e in got) / 1e3)
    finally:
        if traced:
            for kind in kinds:
                cupti.activity_disable(kind)
            cupti.activity_flush_all(1)
    med = lambda v: round(statistics.median(v), 3) if v else None
    return {"events_us": med(events), "span_us": med(spans), "union_us": med(unions),
            "sum_us": med(sums), "kernels": med(counts),
            "events_minus_span_us": med([e - s for e, s in zip(events, spans)])
            if spans else None}



if __name__ == "__main__":
    sys.exit(main())
