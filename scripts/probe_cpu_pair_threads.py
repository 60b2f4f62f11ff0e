"""Probe: where a CPU-mode candidate's threads run while its judge times it.

On the 2-core development host an identical pair of 512x4096 softmaxes compared in CPU mode
reads a speedup of ~0.5: the reference, timed inside its judge, 0.46 ms; the candidate,
timed through the judge, 0.9-1.0 ms. This starts a CPU-mode server (one job at a time) and
sends one /compare whose candidate instruments itself: for each call, its wall time, the
process's CPU time and the CPU each of its threads last ran on (``/proc/self/task``). After
12 calls that follow a pause (the judge's samples, not the back-to-back warm-up) it raises
with what it saw, so the answer's runtime_error carries the figures. Then the same pair with
OMP_NUM_THREADS given (default 1) compares the speedups.

    python scripts/probe_cpu_pair_threads.py [--threads 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import start_server

BODY = "return torch.softmax(x, dim=-1)"
TAIL = ("\ndef get_inputs():\n    return [torch.randn(512, 4096)]\n\n"
        "def get_init_inputs():\n    return []\n")
PLAIN = "class {name}(torch.nn.Module):\n    def forward(self, x):\n        " + BODY + "\n" + TAIL
SEEN = '''
import os, resource, time

_SEEN = {"calls": [], "after_pause": 0}


def _last_cpus():
    return tuple(int(open(f"/proc/self/task/{t}/stat").read().rsplit(")", 1)[1].split()[36])
                 for t in sorted(os.listdir("/proc/self/task")))


class ModelNew(torch.nn.Module):
    def forward(self, x):
        calls = _SEEN["calls"]
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        paused = bool(calls) and t0 - calls[-1]["end"] > 0.006
        y = ''' + BODY.removeprefix("return ") + '''
        t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
        calls.append({"end": t1, "ms": round((t1 - t0) * 1e3, 3),
                      "cpu_per_wall": round(cpu / (t1 - t0), 2), "threads_on": _last_cpus(),
                      "after_pause": paused})
        _SEEN["after_pause"] += paused
        if _SEEN["after_pause"] == 12:
            rows = [(c["ms"], c["cpu_per_wall"], c["threads_on"], c["after_pause"])
                    for c in calls[-40:]]
            raise RuntimeError(f"SEEN threads={torch.get_num_threads()} calls={rows}")
        return y
''' + TAIL


def compare(url: str, custom: str) -> dict:
    r = httpx.post(f"{url}/compare", json={
        "ref_kernel": {"source_code": PLAIN.format(name="Model"), "kernel_type": "torch"},
        "custom_kernel": {"source_code": custom, "kernel_type": "torch"},
        "num_trials": 30}, timeout=300)
    return r.json()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1", help="OMP_NUM_THREADS of the second server")
    args = parser.parse_args()
    for env in ({}, {"OMP_NUM_THREADS": args.threads}):
        server = start_server(Path(tempfile.mkdtemp()), {"MAX_WORKERS": "1", **env})
        try:
            print(f"== server env {env or 'as is'}")
            seen = compare(server.url, SEEN)["kernel_exec_result"]
            print("instrumented candidate:", (seen.get("runtime_error") or "").splitlines()[-1])
            for _ in range(3):
                answer = compare(server.url, PLAIN.format(name="ModelNew"))
                k, ref = answer["kernel_exec_result"], answer["ref_exec_result"]
                print(f"identical pair: speedup {k['metadata']['speedup']:.3f}, candidate "
                      f"{k['runtime_stats']['median']:.3f} ms, reference "
                      f"{ref['runtime_stats']['median']:.3f} ms")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
