"""Probe: where a CPU-mode candidate's threads run while its judge times it.

On the 2-core development host an identical pair of 512x4096 softmaxes compared in CPU mode
read a speedup of ~0.5 while job processes ran torch's default team of threads: the
reference, timed inside its judge, 0.46 ms; the candidate, timed through the judge, 0.9-1.0
ms. Job processes now run one thread unless OMP_NUM_THREADS says otherwise, held to as many
cores (harness.process.cpu_threads, worker_host.cpu_cores). This starts a CPU-mode server (one job at a time) and sends one
/compare whose candidate instruments itself: for each call, its wall time, the process's CPU
time and the CPU each of its threads last ran on (``/proc/self/task``). After 12 calls that
follow a pause (the judge's samples, not the back-to-back warm-up) it raises with what it
saw, so the answer's runtime_error carries the figures. Then three identical pairs, and
``--rounds`` times ``--at-once`` identical pairs sent together to a fresh server; then the
same with OMP_NUM_THREADS given (default 2).

    python scripts/probe_cpu_pair_threads.py [--threads 2] [--only-default] [--env NAME=VALUE ...]
"""

from __future__ import annotations

import argparse
import concurrent.futures
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


def compare(url: str, custom: str, tag: str = "") -> dict:
    ref = PLAIN.format(name="Model")
    if tag:  # a reference of its own (the same code): each pair times its reference
        ref, custom = f"TAG = {tag!r}\n{ref}", f"TAG = {tag!r}\n{custom}"
    r = httpx.post(f"{url}/compare", json={
        "ref_kernel": {"source_code": ref, "kernel_type": "torch"},
        "custom_kernel": {"source_code": custom, "kernel_type": "torch"},
        "num_trials": 30}, timeout=300)
    return r.json()


def at_once(env: dict[str, str], pairs: int, rounds: int) -> None:
    """``rounds`` times, ``pairs`` identical pairs sent at once to a fresh server running as
    many jobs at a time."""
    for _ in range(rounds):
        server = start_server(Path(tempfile.mkdtemp()), {"MAX_WORKERS": str(pairs), **env})
        try:
            url, same = server.url, PLAIN.format(name="ModelNew")
            with concurrent.futures.ThreadPoolExecutor(pairs) as pool:
                answers = list(pool.map(compare, [url] * pairs, [same] * pairs,
                                        [f"p{i}" for i in range(pairs)]))
            print(f"{pairs} identical pairs at once: speedups "
                  f"{[round(a['kernel_exec_result']['metadata']['speedup'], 3) for a in answers]}")
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="2", help="OMP_NUM_THREADS of the second server")
    parser.add_argument("--only-default", action="store_true", help="the server as is only")
    parser.add_argument("--env", nargs="*", default=[], help="NAME=VALUE for both servers")
    parser.add_argument("--at-once", type=int, default=4, help="identical pairs sent at once")
    parser.add_argument("--rounds", type=int, default=3, help="fresh servers for those")
    args = parser.parse_args()
    for env in ({}, {"OMP_NUM_THREADS": args.threads})[:1 if args.only_default else 2]:
        env = {**env, **dict(kv.split("=", 1) for kv in args.env)}
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
        at_once(env, args.at_once, args.rounds)


if __name__ == "__main__":
    main()
