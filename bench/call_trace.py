"""Where the judge's interval goes: per job, the steps of its calibration calls and its timed
samples, from the host clock stamps a server writes with ``KES_CALL_TRACE`` set.

    KES_CALL_TRACE=/tmp/trace.jsonl python main.py      # then run /compare jobs
    python bench/call_trace.py /tmp/trace.jsonl [--json out.json]

Both processes stamp with CLOCK_MONOTONIC (``time.perf_counter_ns``), one clock for the host.
Steps of one call (medians per job, microseconds):

- ``inputs``: the judge writes the inputs into the arena, flushes the L2, synchronises
  (before its clock starts: not part of ``total``);
- ``to_kernel``: from the judge's send until the kernel's process has the request;
- ``before``: the kernel's process until its sample starts (binding the call);
- ``enqueue``: the stream held, the events and the call enqueued (the host's launch cost);
- ``gpu``: from the release until the device is synchronised (the GPU's work after it);
- ``hand``: the outputs copied into the arena, synchronised;
- ``to_judge``: from the kernel's process's last stamp until the judge has the reply;
- ``outputs``: the judge copies the outputs into its own memory, synchronises;
- ``event``: the CUDA-event figure the kernel's process reported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

STEPS = ("inputs", "to_kernel", "before", "enqueue", "gpu", "hand", "to_judge", "outputs")
HAND_STEPS = ("hand_copy", "hand_sync", "hand_rest")  # the hand's parts, where stamped


def steps(stamps: list[int]) -> dict[str, float] | None:
    """A call's steps in microseconds, or None when its stamps are incomplete."""
    if len(stamps) < 9:
        return None
    t0, sent, answered, t1, recv, start, enqueued, synced = stamps[:8]
    handed = stamps[-1]
    parts = (sent - t0, recv - sent, start - recv, enqueued - start, synced - enqueued,
             handed - synced, answered - handed, t1 - answered)
    out = {name: part / 1e3 for name, part in zip(STEPS, parts)}
    if len(stamps) >= 11:  # the hand-over's own stamps: copies enqueued, synchronised
        copied, hand_synced = stamps[8:10]
        out.update(hand_copy=(copied - synced) / 1e3, hand_sync=(hand_synced - copied) / 1e3,
                   hand_rest=(handed - hand_synced) / 1e3)
    return out


def medians(calls: list[list[int]], events: list[float]) -> dict[str, float]:
    rows = [s for s in (steps(c) for c in calls) if s is not None]
    names = [name for name in (*STEPS, *HAND_STEPS) if rows and all(name in r for r in rows)]
    out = {name: statistics.median(r[name] for r in rows) for name in names}
    out["total"] = statistics.median(sum(r[name] for name in STEPS[1:]) for r in rows) \
        if rows else 0.0
    if events:
        out["event"] = statistics.median(events) * 1e3
    return out


def summarize(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    jobs = []
    for line in lines:
        cal = medians(line.get("calibration", []), line.get("calibration_event_ms", []))
        smp = medians(line.get("samples", []), line.get("event_ms", []))
        nulls = medians(line.get("nulls", []), line.get("null_event_ms", []))
        jobs.append({"job_id": line.get("job_id"), "suspicious": line.get("suspicious"),
                     "judge_ms": line.get("figures", {}).get("judge_ms"),
                     "calibration": cal, "samples": smp, "nulls": nulls,
                     "difference": {k: round(smp.get(k, 0.0) - cal.get(k, 0.0), 1)
                                    for k in (*STEPS, "total", "event")},
                     "null_drift": {k: round(nulls.get(k, 0.0) - cal.get(k, 0.0), 1)
                                    for k in (*STEPS, *HAND_STEPS, "total", "event")}
                     if nulls else {}})
    return jobs


def table(jobs: list[dict[str, Any]]) -> str:
    cols = (*STEPS, *HAND_STEPS, "total", "event")
    out = ["| job | flagged | | " + " | ".join(cols) + " |",
           "|---|---|---|" + "---|" * len(cols)]
    for job in jobs:
        for part in ("calibration", "nulls", "null_drift", "samples", "difference"):
            figures = job.get(part) or {}
            if not figures:
                continue
            out.append(f"| {str(job['job_id'])[:8]} | {'yes' if job['suspicious'] else ''} | "
                       f"{part} | " + " | ".join(f"{figures.get(c, 0.0):.1f}" for c in cols)
                       + " |")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    lines = [json.loads(t) for t in args.trace.read_text().splitlines() if t.strip()]
    jobs = summarize(lines)
    print(table(jobs))
    if args.json:
        args.json.write_text(json.dumps(jobs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
