"""Soak test: thousands of mixed jobs against one server. Does it run unattended?

    python bench/soak.py [URL] [--jobs 2000] [--concurrency 32] [--pid PID]
                         [--out bench/results/soak.json]

Without URL it starts its own server (``main.py`` on a free localhost port, fresh state in a
temporary directory); with one, it finds the server's process by the URL's port unless
``--pid`` names it (the process checks need the server on this host).

The jobs, drawn in a fixed shuffled order from a weighted mix (``--mix``): ``good`` (a torch
kernel, /evaluate), ``wrong`` (a /compare whose custom kernel is off by one), ``crash`` (a
kernel that segfaults its worker), ``timeout`` (a kernel that sleeps past its ``--timeout``)
and ``flood`` (a kernel that prints ``--flood-mb`` MB in 500 KB lines, then is correct). Each
is submitted with ``?wait=false`` (a 429 is retried after its Retry-After) and polled at
``GET /job/{id}`` until final.

What must hold (each is a check in the report; the exit status is 1 if any fails):

- every job reaches a final state (completed, timed_out, failed); none is lost or stuck;
- each kind gets its verdict: good and flood ``success``, wrong ``incorrect``, crash
  ``runtime_error``, timeout the state ``timed_out``; no answer is a 5xx;
- a flooding job's log (``GET /job/{id}/log``) is capped: at most 1 MiB and a marker;
- no process leak: once the server is idle again, it has no more descendant processes than
  before the run, and no worker process lives outside its tree;
- no GPU memory leak (where ``nvidia-smi`` exists): used memory per GPU back within
  ``--gpu-tolerance-mb`` of the baseline;
- the server's memory stays flat: its RSS once idle at the end is within
  ``--rss-tolerance-mb`` of its RSS after the first 10% of the jobs, and its open file
  descriptors do not grow.

Writes the JSON (``--out``) and a human summary next to it (same name, ``.md``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

ROOT = Path(__file__).resolve().parent.parent
FINAL_STATES = {"completed", "timed_out", "failed"}
WORKER_MARKERS = ("subprocess_worker", "worker_host.zygote", "orchestration.worker")
# Environment variables that tell one server's processes from another's (workers inherit
# the server's environment); a server the soak starts gets a SOAK_RUN of its own.
IDENTITY_KEYS = ("SOAK_RUN", "PORT", "JOB_DIR", "JOB_STORE_PATH")
LOG_CAP_BYTES = 1024 * 1024 + 4096  # head + tail, plus the marker line and some slack
DEFAULT_MIX = "good=50,wrong=20,crash=15,timeout=3,flood=12"

X_IO = {"args": [{"name": "x", "type": "tensor", "role": "input",
                  "tensor_spec": {"shape": [4096], "dtype": "float32",
                                  "init": {"kind": "randn", "seed": 7}}}]}
GOOD = (
    "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
    "        return x * 2\n"
)
OFF_BY_ONE = GOOD.replace("return x * 2", "return x * 2 + 1")
CRASH = (
    "import ctypes\nimport torch\nclass Model(torch.nn.Module):\n"
    "    def forward(self, x):\n        ctypes.string_at(0)  # segfault\n        return x\n"
)
SLEEPER = (
    "import time\nimport torch\nclass Model(torch.nn.Module):\n"
    "    def forward(self, x):\n        time.sleep(3600)\n        return x\n"
)


def flood_source(megabytes: int) -> str:
    lines = megabytes * 2  # 500 KB lines
    return (
        "import sys\nimport torch\n"
        "_line = 'y' * (500 * 1024 - 1) + '\\n'\n"
        f"for _ in range({lines}):\n    sys.stdout.write(_line)\nsys.stdout.flush()\n"
        "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
    )


def kernel(source: str) -> dict[str, Any]:
    return {"source_code": source, "kernel_type": "torch", "io": X_IO}


@dataclass(frozen=True)
class Kind:
    name: str
    route: str
    body: dict[str, Any]
    timeout: int
    state: str  # the final state it must reach
    outcome: str | None  # the kernel_exec_result.outcome it must get (None: not checked)


def kinds(timeout: int, flood_mb: int) -> dict[str, Kind]:
    def evaluate(source: str, t: int) -> dict[str, Any]:
        return {"kernel": kernel(source), "num_trials": 5, "timeout": t}

    wrong = {"ref_kernel": kernel(GOOD), "custom_kernel": kernel(OFF_BY_ONE), "num_trials": 5,
             "num_correct_trials": 2, "timeout": 60}
    return {
        "good": Kind("good", "/evaluate", evaluate(GOOD, 60), 60, "completed", "success"),
        "wrong": Kind("wrong", "/compare", wrong, 60, "completed", "incorrect"),
        "crash": Kind("crash", "/evaluate", evaluate(CRASH, 60), 60, "completed",
                      "runtime_error"),
        "timeout": Kind("timeout", "/evaluate", evaluate(SLEEPER, timeout), timeout,
                        "timed_out", None),
        "flood": Kind("flood", "/evaluate", evaluate(flood_source(flood_mb), 120), 120,
                      "completed", "success"),
    }


@dataclass
class JobRecord:
    kind: str
    job_id: str | None = None
    state: str = "not_submitted"
    outcome: str | None = None
    seconds: float = 0.0
    busy_retries: int = 0
    problem: str | None = None  # why this job fails the soak, if it does
    log_bytes: int | None = None


@dataclass
class Samples:
    """What the sampler saw of the server process, once a second."""

    t: list[float] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)
    descendants: list[int] = field(default_factory=list)


# ---- the host's processes --------------------------------------------------------------------


def read_proc(pid: int, name: str) -> str | None:
    try:
        return Path(f"/proc/{pid}/{name}").read_text(errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def rss_mb(pid: int) -> float | None:
    status = read_proc(pid, "status") or ""
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return None


def open_fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, PermissionError):
        return None


def process_table() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, state, command line) of every live process."""
    table: dict[int, tuple[int, str, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = read_proc(int(entry), "stat")
        if stat is None:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        cmdline = (read_proc(int(entry), "cmdline") or "").replace("\0", " ").strip()
        table[int(entry)] = (int(fields[1]), fields[0], cmdline)
    return table


def descendants(pid: int, table: dict[int, tuple[int, str, str]]) -> set[int]:
    children: dict[int, list[int]] = {}
    for child, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(child)
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def identity(pid: int) -> dict[str, str]:
    """The environment variables of ``pid`` that name its server (see IDENTITY_KEYS)."""
    environ = (read_proc(pid, "environ") or "").split("\0")
    pairs = dict(item.split("=", 1) for item in environ if "=" in item)
    return {key: pairs[key] for key in IDENTITY_KEYS if key in pairs}


def process_census(server_pid: int, ignore: frozenset[int] = frozenset()) -> dict[str, Any]:
    """The server's descendants, zombies among them, and strays: worker processes of this
    server (same identity) outside its tree, e.g. orphans of a killed worker. Processes in
    ``ignore`` (strays seen before the run) are not counted again."""
    table = process_table()
    tree = descendants(server_pid, table)
    mine = identity(server_pid)
    strays = [
        f"{pid}: {cmd[:120]}" for pid, (_, state, cmd) in table.items()
        if pid not in tree and pid != server_pid and pid not in ignore and state != "Z"
        and any(marker in cmd for marker in WORKER_MARKERS)
        and (identity(pid) == mine if mine else True)
    ]  # fmt: skip
    return {
        "descendants": len(tree),
        "zombies": sum(1 for pid in tree if table[pid][1] == "Z"),
        "strays": strays,
    }


def find_pid_by_port(port: int) -> int | None:
    """The process listening on ``port`` (through /proc/net/tcp and each process's fds)."""
    inodes: set[str] = set()
    for name in ("tcp", "tcp6"):
        text = read_proc(os.getpid(), f"net/{name}") or ""
        for line in text.splitlines()[1:]:
            parts = line.split()
            if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
                inodes.add(parts[9])
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{entry}/fd"):
                target = os.readlink(f"/proc/{entry}/fd/{fd}")
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    return int(entry)
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
    return None


def gpu_memory_mb() -> dict[str, float] | None:
    """Used memory per GPU, from nvidia-smi; None where there is none."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (FileNotFoundError, subprocess.SubprocessError):
        return None
    used = {}
    for line in out.strip().splitlines():
        index, mem = (part.strip() for part in line.split(","))
        used[index] = float(mem)
    return used or None


# ---- the server ------------------------------------------------------------------------------


@contextmanager
def server_at(url: str | None, pid: int | None, env: dict[str, str]) -> Iterator[tuple[str, int]]:
    """(url, pid) of the server to soak: the one given, or one started for the run."""
    if url is not None:
        port = urlsplit(url).port or (443 if url.startswith("https") else 80)
        pid = pid or find_pid_by_port(port)
        if pid is None:
            raise SystemExit(f"no process listens on port {port} here; pass --pid")
        yield url.rstrip("/"), pid
        return
    sys.path.insert(0, str(ROOT))
    from tests.conftest import start_server

    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        server = start_server(Path(tmp), env)
        try:
            yield server.url, server.proc.pid
        finally:
            server.stop()


async def wait_idle(client: httpx.AsyncClient, deadline_s: float) -> bool:
    """Poll /stats until nothing is queued or running."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        stats = (await client.get("/stats")).json()
        if stats.get("jobs_queued", 0) == 0 and stats.get("jobs_running", 0) == 0:
            return True
        await asyncio.sleep(0.5)
    return False


async def settle(
    server_pid: int, baseline: dict[str, Any], deadline_s: float
) -> tuple[dict[str, Any], int | None]:
    """The census and the server's open fds once both are back to their baseline (or at the
    deadline): spares that replace used workers take a moment to start, and the server
    closes the soak's connections after it does."""
    end = time.monotonic() + deadline_s
    ignore = frozenset(int(s.split(":")[0]) for s in baseline["strays"])
    while True:
        census, fds = process_census(server_pid, ignore), open_fds(server_pid)
        settled = census["descendants"] <= baseline["descendants"] and not census["strays"]
        if (settled and (fds or 0) <= baseline["fds"]) or time.monotonic() > end:
            return census, fds
        await asyncio.sleep(1.0)


# ---- the jobs --------------------------------------------------------------------------------


async def run_job(
    client: httpx.AsyncClient, kind: Kind, gate: asyncio.Semaphore, job_deadline_s: float,
    errors_5xx: list[str],
) -> JobRecord:
    record = JobRecord(kind.name)
    async with gate:
        started = time.monotonic()
        while True:
            r = await client.post(kind.route, params={"wait": "false"}, json=kind.body)
            if r.status_code != 429:
                break
            record.busy_retries += 1
            await asyncio.sleep(float(r.headers.get("retry-after", "1")))
        if r.status_code >= 500:
            errors_5xx.append(f"POST {kind.route}: {r.status_code} {r.text[:200]}")
        if r.status_code != 202:
            record.problem = f"submission answered HTTP {r.status_code}: {r.text[:300]}"
            return record
        record.job_id = r.json()["job_id"]
        record.state = "queued"
        delay, deadline = 0.05, started + job_deadline_s
        while True:
            s = await client.get(f"/job/{record.job_id}")
            if s.status_code >= 500:
                errors_5xx.append(f"GET /job/{record.job_id}: {s.status_code} {s.text[:200]}")
            if s.status_code == 200:
                body = s.json()
                record.state = body["state"]
                if record.state in FINAL_STATES:
                    result = body.get("result") or {}
                    record.outcome = (result.get("kernel_exec_result") or {}).get("outcome")
                    break
            if time.monotonic() > deadline:
                record.problem = f"still {record.state} after {job_deadline_s:.0f} s"
                return record
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
        record.seconds = time.monotonic() - started
    if record.state != kind.state:
        error = (body.get("error") or "")[:300]
        record.problem = f"state {record.state} (wanted {kind.state}): {error}"
    elif kind.outcome is not None and record.outcome != kind.outcome:
        record.problem = f"outcome {record.outcome} (wanted {kind.outcome})"
    if kind.name == "flood" and record.state == "completed":
        await check_capped_log(client, record)
    return record


async def check_capped_log(client: httpx.AsyncClient, record: JobRecord) -> None:
    """A flooding job's log is capped (its head and tail, the rest counted)."""
    log_deadline = time.monotonic() + 30  # the log is saved a moment after the answer
    log = await client.get(f"/job/{record.job_id}/log")
    while log.status_code == 200 and not log.content and time.monotonic() < log_deadline:
        await asyncio.sleep(0.2)
        log = await client.get(f"/job/{record.job_id}/log")
    record.log_bytes = len(log.content)
    if log.status_code != 200:
        record.problem = f"GET /job/{record.job_id}/log answered {log.status_code}"
    elif record.log_bytes > LOG_CAP_BYTES or b"bytes omitted" not in log.content:
        record.problem = f"log not capped: {record.log_bytes} bytes"


async def sampler(server_pid: int, samples: Samples, stop: asyncio.Event) -> None:
    t0 = time.monotonic()
    while not stop.is_set():
        rss, fds = rss_mb(server_pid), open_fds(server_pid)
        if rss is not None and fds is not None:
            samples.t.append(round(time.monotonic() - t0, 1))
            samples.rss_mb.append(round(rss, 1))
            samples.fds.append(fds)
            samples.descendants.append(process_census(server_pid)["descendants"])
        try:
            await asyncio.wait_for(stop.wait(), timeout=1.0)
        except asyncio.TimeoutError:
            pass


def draw_mix(mix: str, n: int, seed: int) -> list[str]:
    weights = {name: float(w) for name, w in (part.split("=") for part in mix.split(","))}
    total = sum(weights.values())
    names = [name for name, w in weights.items() for _ in range(round(n * w / total))]
    names = (names + ["good"] * n)[:n]  # rounding: top up with good jobs
    random.Random(seed).shuffle(names)
    return names


async def soak(args: argparse.Namespace, url: str, pid: int) -> dict[str, Any]:
    catalogue = kinds(args.timeout, args.flood_mb)
    order = draw_mix(args.mix, args.jobs, args.seed)
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        health = (await client.get("/health")).json()
        print(f"soak: {args.jobs} jobs against {url} (pid {pid}, {health.get('device')}, "
              f"{health.get('gpu_count')} GPU)", flush=True)
        for _ in range(args.warmup):  # start the spares and fill the caches first
            await client.post("/evaluate", json=catalogue["good"].body)
        await wait_idle(client, 120)
    await asyncio.sleep(1.0)  # the server closes the warm-up's connection
    before = {**process_census(pid), "fds": open_fds(pid) or 0}
    before_gpu = gpu_memory_mb()

    limits = httpx.Limits(max_connections=args.concurrency + 8)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        samples, stop = Samples(), asyncio.Event()
        sampling = asyncio.create_task(sampler(pid, samples, stop))
        gate = asyncio.Semaphore(args.concurrency)
        errors_5xx: list[str] = []
        tasks = [
            asyncio.create_task(
                run_job(client, catalogue[name], gate, args.job_deadline, errors_5xx)
            )
            for name in order
        ]
        records: list[JobRecord] = []
        warm_rss: float | None = None
        started = time.monotonic()
        for done in asyncio.as_completed(tasks):
            records.append(await done)
            if warm_rss is None and len(records) >= max(1, args.jobs // 10):
                warm_rss = rss_mb(pid)
            if len(records) % max(1, args.jobs // 10) == 0:
                print(f"  {len(records)}/{args.jobs} done, {time.monotonic() - started:.0f} s",
                      flush=True)
        run_s = time.monotonic() - started
        idle = await wait_idle(client, 300)
        metrics = (await client.get("/metrics")).text if args.metrics else ""
    after, after_fds = await settle(pid, before, args.settle)
    after_gpu = gpu_memory_mb()
    stop.set()
    await sampling
    end_rss = rss_mb(pid)
    return report(args, records, samples, errors_5xx, run_s, idle, before, after, before_gpu,
                  after_gpu, before["fds"], after_fds, warm_rss, end_rss, health, metrics)


# ---- the verdict -----------------------------------------------------------------------------


def report(
    args: argparse.Namespace, records: list[JobRecord], samples: Samples, errors_5xx: list[str],
    run_s: float, idle: bool, before: dict[str, Any], after: dict[str, Any],
    before_gpu: dict[str, float] | None, after_gpu: dict[str, float] | None,
    before_fds: int | None, after_fds: int | None, warm_rss: float | None,
    end_rss: float | None, health: dict[str, Any], metrics: str,
) -> dict[str, Any]:
    problems = [r for r in records if r.problem]
    by_kind: dict[str, Any] = {}
    for name in sorted({r.kind for r in records}):
        mine = [r for r in records if r.kind == name]
        seconds = sorted(r.seconds for r in mine if r.state in FINAL_STATES)
        by_kind[name] = {
            "jobs": len(mine),
            "states": dict(Counter(r.state for r in mine)),
            "outcomes": dict(Counter(str(r.outcome) for r in mine)),
            "as_expected": sum(1 for r in mine if not r.problem),
            "median_s": round(statistics.median(seconds), 3) if seconds else None,
            "p95_s": round(seconds[int(0.95 * (len(seconds) - 1))], 3) if seconds else None,
        }
    gpu_growth = (
        {gpu: round(after_gpu[gpu] - before_gpu.get(gpu, 0.0), 1) for gpu in after_gpu}
        if before_gpu and after_gpu else None
    )  # fmt: skip
    rss_growth = end_rss - warm_rss if end_rss is not None and warm_rss is not None else None
    checks = {
        "every job reached a final state": all(r.state in FINAL_STATES for r in records)
        and len(records) == args.jobs,
        "every job got its expected verdict": not problems,
        "no answer was a 5xx": not errors_5xx,
        "the server went idle after the run": idle,
        "no process leak (descendants back to baseline, no strays, no zombies)": (
            after["descendants"] <= before["descendants"] and not after["strays"]
            and after["zombies"] == 0
        ),
        "no GPU memory leak": gpu_growth is None
        or all(g <= args.gpu_tolerance_mb for g in gpu_growth.values()),
        "server RSS flat": rss_growth is not None and rss_growth <= args.rss_tolerance_mb,
        "server file descriptors flat": before_fds is not None and after_fds is not None
        and after_fds <= before_fds,
    }
    return {
        "passed": all(checks.values()),
        "checks": checks,
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "server": {"device": health.get("device"), "gpu_count": health.get("gpu_count"),
                   "gpus": health.get("gpus"), "version": health.get("version")},
        "run_seconds": round(run_s, 1),
        "jobs_per_second": round(len(records) / run_s, 2) if run_s else None,
        "busy_retries": sum(r.busy_retries for r in records),
        "by_kind": by_kind,
        "problems": [asdict(r) for r in problems[:50]],
        "problem_count": len(problems),
        "errors_5xx": errors_5xx[:20],
        "processes": {"before": before, "after": after},
        "gpu_memory_mb": {"before": before_gpu, "after": after_gpu, "growth": gpu_growth},
        "server_rss_mb": {
            "after_first_10pct": warm_rss, "end": end_rss, "growth": rss_growth,
            "max": max(samples.rss_mb) if samples.rss_mb else None,
        },
        "server_fds": {"before": before_fds, "after": after_fds},
        "samples": _thin(samples),
        "metrics_jobs_total": _jobs_total(metrics),
    }


def _thin(samples: Samples, points: int = 200) -> dict[str, list[Any]]:
    step = max(1, len(samples.t) // points)
    return {name: values[::step] for name, values in asdict(samples).items()}


def _jobs_total(metrics: str) -> dict[str, float]:
    totals: dict[str, float] = {}
    for line in metrics.splitlines():
        if line.startswith("kernel_eval_jobs_total{"):
            labels, value = line.rsplit(" ", 1)
            totals[labels[len("kernel_eval_jobs_total"):]] = float(value)
    return totals


def markdown(result: dict[str, Any]) -> str:
    cfg, rss, processes = result["config"], result["server_rss_mb"], result["processes"]
    lines = [
        f"# Soak: {'PASSED' if result['passed'] else 'FAILED'}",
        "",
        (
            f"{cfg['jobs']} jobs (mix {cfg['mix']}), {cfg['concurrency']} at a time, against a "
            f"server on {result['server']['device']} ({result['server']['gpu_count']} GPU): "
            f"{result['run_seconds']} s, {result['jobs_per_second']} jobs/s, "
            f"{result['busy_retries']} submissions retried after 429."
        ),
        "",
        "| check | |",
        "|---|---|",
        *[f"| {name} | {'ok' if ok else 'FAILED'} |" for name, ok in result["checks"].items()],
        "",
        "| kind | jobs | as expected | states | outcomes | median s | p95 s |",
        "|---|---|---|---|---|---|---|",
        *[
            f"| {name} | {k['jobs']} | {k['as_expected']} | {k['states']} | {k['outcomes']} | "
            f"{k['median_s']} | {k['p95_s']} |"
            for name, k in result["by_kind"].items()
        ],
        "",
        (
            f"Server RSS: {rss['after_first_10pct']} MB after the first 10% of jobs, "
            f"{rss['end']} MB at the end (max {rss['max']} MB). Open fds: "
            f"{result['server_fds']['before']} before, {result['server_fds']['after']} after."
        ),
        (
            f"Server processes: {processes['before']['descendants']} descendants before, "
            f"{processes['after']['descendants']} after; strays after: "
            f"{len(processes['after']['strays'])}."
        ),
        (
            f"GPU memory (MiB): before {result['gpu_memory_mb']['before']}, after "
            f"{result['gpu_memory_mb']['after']}."
        ),
    ]
    if result["problems"]:
        lines += ["", f"First problems ({result['problem_count']} in all):", ""]
        lines += [f"- {p['kind']} {p['job_id']}: {p['problem']}" for p in result["problems"][:20]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", nargs="?", help="server to soak (default: start one)")
    parser.add_argument("--pid", type=int, help="the server's pid (default: found by port)")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32, help="jobs in flight at once")
    parser.add_argument("--mix", default=DEFAULT_MIX, help=f"kind=weight,... ({DEFAULT_MIX})")
    parser.add_argument("--timeout", type=int, default=2, help="timeout of 'timeout' jobs, s")
    parser.add_argument("--flood-mb", type=int, default=100, help="output of 'flood' jobs")
    parser.add_argument("--seed", type=int, default=11, help="shuffles the mix")
    parser.add_argument("--warmup", type=int, default=3, help="good jobs before the baseline")
    parser.add_argument("--job-deadline", type=float, default=1800.0,
                        help="seconds from submission after which a job counts as stuck")
    parser.add_argument("--settle", type=float, default=60.0,
                        help="seconds to wait for the process tree to shrink back")
    parser.add_argument("--rss-tolerance-mb", type=float, default=64.0)
    parser.add_argument("--gpu-tolerance-mb", type=float, default=256.0)
    parser.add_argument("--no-metrics", dest="metrics", action="store_false",
                        help="do not scrape /metrics at the end")
    parser.add_argument("--max-workers", default="", help="MAX_WORKERS of a started server")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/soak.json")
    args = parser.parse_args(argv)

    env = {"LOG_LEVEL": "warning", "SOAK_RUN": uuid.uuid4().hex}
    if args.max_workers:
        env["MAX_WORKERS"] = args.max_workers
    with server_at(args.url, args.pid, env) as (url, pid):
        result = asyncio.run(soak(args, url, pid))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    summary = markdown(result)
    args.out.with_suffix(".md").write_text(summary)
    print(summary)
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
