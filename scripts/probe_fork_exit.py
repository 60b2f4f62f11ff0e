"""Where a job process's exit goes: a process forked from a zygote against one started fresh,
and the worker's own start against the same steps taken bare.

A ready worker of the real pool is reaped 104-123 ms after SIGKILL on the H100; a fresh
``python -c`` process that made the same start (context, cuBLAS, timer, rehearsal) 90 ms, one
with a context alone 45-55 ms (``scripts/probe_spare_parts.py``, ``probe_worker_exit.py``).
This probe takes that start apart, beside 6 idle contexts (`--idle`), every process with one hardware
queue, the variants interleaved: ``exec`` (a fresh interpreter) against ``fork`` (a child of
this process after it imported what the zygote imports, ``worker_host.zygote.preload``, and
froze its heap); the steps alone against ``subprocess_worker.serve`` (the worker's start and
its loop); forked once against twice (through a middle process that waits for it, as the
sandbox's outer process does); the probe's environment against the pool's. Each reports the
milliseconds from SIGKILL until the process is reaped and, for the steps, its page tables and
anonymous memory before the kill (VmPTE, RssAnon).

    python scripts/probe_fork_exit.py [--repeats 5] [--only WORD,WORD] [--out FILE]

Diagnostics for issue 26 (the trivial /evaluate's floor is the last job's exit); prints one
JSON document.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from probe_common import emit, idle_contexts

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

@dataclass(frozen=True)
class Variant:
    steps: str = "prepare timer rehearse"  # what the job process does before it is killed
    fork: bool = True  # forked from this process (else a fresh interpreter)
    depth: int = 1  # 2: through a middle process that waits for it (the sandbox's outer)
    serve: bool = False  # the worker's own start (subprocess_worker.serve), not the steps
    pool_env: bool = False  # with what the pool adds to the environment
    # through the zygote's own spawn (its outer process, and the sandbox where "sandbox"):
    # the pool's path, minus the pool and the zygote as a process of their own
    zygote: str | None = None
    # what the sandbox's outer process does to the job process before its start, each alone
    # (worker_host.zygote._outer): "oom" (first for the OOM killer), "pdeath" (dies with its
    # parent), "pipe" (its output to a pipe), "cupy" (CuPy's cache directory made)
    outer: str = ""
    env: dict[str, str] = field(default_factory=dict)  # set last


VARIANTS = {
    "exec / context": Variant("context", fork=False),
    "exec / spare": Variant(fork=False),
    "fork / context": Variant("context"),
    "fork / spare": Variant(),
    "fork / spare, cache released": Variant("prepare timer rehearse release"),
    "fork / spare, pool's environment": Variant(pool_env=True),
    "fork twice / spare": Variant(depth=2),
    "fork / serve": Variant(serve=True),
    "fork twice / serve, pool's environment": Variant(depth=2, serve=True, pool_env=True),
    "fork twice / serve, oom": Variant(depth=2, serve=True, pool_env=True, outer="oom"),
    "fork twice / serve, pdeath": Variant(depth=2, serve=True, pool_env=True, outer="pdeath"),
    "fork twice / serve, pipe": Variant(depth=2, serve=True, pool_env=True, outer="pipe"),
    "fork twice / serve, cupy": Variant(depth=2, serve=True, pool_env=True, outer="cupy"),
    "fork twice / serve, all four": Variant(depth=2, serve=True, pool_env=True,
                                            outer="oom pdeath pipe cupy"),
    "fork twice / serve, 8 queues": Variant(depth=2, serve=True, pool_env=True,
                                            env={"CUDA_DEVICE_MAX_CONNECTIONS": "8"}),
    "zygote.spawn / no sandbox": Variant(zygote="none"),
    "zygote.spawn / no sandbox, 8 queues": Variant(zygote="none",
                                                   env={"CUDA_DEVICE_MAX_CONNECTIONS": "8"}),
    "zygote.spawn / sandbox": Variant(zygote="sandbox"),
    # what each part of a spare adds (SPARE_WARM=auto makes "base" spares for a source
    # without matrix products)
    "parts / context": Variant("context"),
    "parts / base": Variant("base"),
    "parts / base, timer": Variant("base timer"),
    "parts / base, timer without CUPTI": Variant("base nocupti"),
    "parts / base, timer, /evaluate rehearsed": Variant("base timer rehearse_alone"),
    "parts / base, timer, rehearsed (a base spare)": Variant("base timer rehearse"),
    "parts / cuBLAS, timer, rehearsed (a cublas spare)": Variant("prepare timer rehearse"),
    # what a spare could hand back before it says it is ready: the heap's free memory
    # (malloc_trim), torch's cached pinned host memory
    "parts / a base spare, heap trimmed": Variant("base timer rehearse trim"),
    "parts / a cublas spare, heap trimmed": Variant("prepare timer rehearse trim"),
    "parts / a cublas spare, pinned cache emptied": Variant("prepare timer rehearse hostcache"),
}
BODY = """
import json, os, sys, time
sys.path.insert(0, {root!r})
steps = {steps!r}.split()
import torch
from harness.process import prepare_process
import subprocess_worker
spent = {{}}
mark = time.perf_counter()
def lap(name):
    global mark
    torch.cuda.synchronize()
    now = time.perf_counter()
    spent[name + "_ms"] = round((now - mark) * 1e3, 1)
    mark = now
torch.cuda.init(); torch.zeros(1, device="cuda"); lap("context")
if "base" in steps:
    os.environ["KES_SPARE_WARM"] = "base"
if "prepare" in steps or "base" in steps:
    prepare_process("cuda"); lap("warm")
if "nocupti" in steps:
    import harness.device_checks as hd
    hd.ActivityTracer._start = classmethod(lambda cls: cls())
if "timer" in steps or "nocupti" in steps:
    worker = subprocess_worker.Worker("cuda"); lap("timer")
if "rehearse" in steps:
    subprocess_worker.rehearse("cuda", worker.timer); lap("rehearsal")
if "rehearse_alone" in steps:  # the rehearsal's /evaluate half alone (an /evaluate spare's)
    os.environ["KES_REHEARSE"] = "alone"
    subprocess_worker.rehearse("cuda", worker.timer); lap("rehearsal")
if "release" in steps:
    import gc
    gc.collect(); torch.cuda.empty_cache(); lap("release")
if "hostcache" in steps:
    (getattr(torch.accelerator, "empty_host_cache", None) or torch._C._host_emptyCache)()
    lap("hostcache")
if "trim" in steps:
    import ctypes, gc
    gc.collect(); ctypes.CDLL("libc.so.6").malloc_trim(0); lap("trim")
torch.cuda.synchronize()
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
facts = {{k: int(status[k].split()[0]) for k in ("VmPTE", "RssAnon", "Threads")}}
facts["gpu_reserved_mib"] = round(torch.cuda.memory_reserved() / 2**20)
facts.update(spent)
os.write({fd}, (json.dumps(facts) + "\\n").encode())
time.sleep(600)
"""
# what the pool adds to a worker's environment (worker_pool.zygote_env, spawn)
DEVICE = "cuda"  # the job process's (a CPU host can try the serve variants with "cpu")
POOL_ENV = {"CUDA_VISIBLE_DEVICES": "0", "PYTHONUNBUFFERED": "1", "KES_DEVICE": "cuda",
            "KES_SPARE_WARM": "cublas", "TMPDIR": "/tmp"}


def gone(pid: int) -> bool:
    """Whether ``pid`` has been reaped (by whichever process is its parent)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            f.read()
        return False
    except OSError:
        return True


def kill_and_time(pid: int, reaped: Callable[[], bool]) -> float:
    t = time.perf_counter()
    os.kill(pid, signal.SIGKILL)
    while not reaped():
        time.sleep(0.0002)
    return round((time.perf_counter() - t) * 1e3, 1)


def run_exec(variant: Variant, env: dict[str, str], cwd: str) -> tuple[dict, float]:
    read, write = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", BODY.format(root=str(ROOT),
                                                              steps=variant.steps, fd=write)],
                            cwd=cwd, env=env, pass_fds=(write,))
    os.close(write)
    facts = json.loads(os.fdopen(read).readline())
    time.sleep(0.2)
    return facts, kill_and_time(proc.pid, lambda: proc.poll() is not None)


def _job(variant: Variant, env: dict[str, str], cwd: str, write: int) -> None:
    """The forked job process: its steps as a probe body, or the worker's own ``serve``."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    if variant.pool_env:
        os.environ.update(POOL_ENV)
    os.environ.update(variant.env)
    if not variant.serve:
        code_text = BODY.format(root=str(ROOT), steps=variant.steps, fd=write)
        exec(compile(code_text, "<child>", "exec"), {"__name__": "__child__"})  # noqa: S102
        return
    import subprocess_worker
    from shared.channel import Channel
    from shared.protocol import Spawn

    os.environ["KES_DEVICE"] = DEVICE
    spawn = Spawn(scratch=cwd, hidden=[], writable=[], readable=[], uid=0, network=False,
                  env={}, scratch_mb=0, requested_at=time.monotonic())
    subprocess_worker.serve(Channel(socket.socket(fileno=write)), spawn)


def _as_the_outer_leaves_it(steps: list[str]) -> None:
    from worker_host import sandbox, zygote

    if "oom" in steps:
        sandbox.first_for_the_oom_killer()
    if "pdeath" in steps:
        sandbox.die_with_parent()
    if "pipe" in steps:
        read, write = os.pipe()
        drain = os.fork()
        if drain == 0:  # keeps the read end open, and reads it, as the server does
            os.close(write)
            while os.read(read, 65536):
                pass
            os._exit(0)
        os.close(read)
        os.dup2(write, 1)
        os.dup2(write, 2)
        os.close(write)
        sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    if "cupy" in steps:
        for cache in {os.environ.get("CUPY_CACHE_DIR", ""), zygote._cupy_cache_dir()} - {""}:
            with contextlib.suppress(OSError):
                os.makedirs(cache, exist_ok=True)


def run_fork(variant: Variant, env: dict[str, str], cwd: str) -> tuple[dict, float]:
    """Fork the job process (through a middle process that waits for it, as the sandbox's
    outer process does, where ``variant.depth`` is 2); kill it once ready; time until reaped."""
    if variant.serve:
        ours, theirs = socket.socketpair()
        read, write = ours.detach(), theirs.detach()
    else:
        read, write = os.pipe()
    pid_read, pid_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read)
            os.close(pid_read)
            job = os.fork() if variant.depth == 2 else 0
            if job:  # the middle process
                os.close(write)
                os.write(pid_write, f"{job}\n".encode())
                os.wait4(job, 0)
            else:
                if variant.depth == 1:
                    os.write(pid_write, f"{os.getpid()}\n".encode())
                os.close(pid_write)
                _job(variant, env, cwd, write)
            code = 0
        except BaseException:  # noqa: BLE001 - said, then the probe hears the channel close
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(write)
    os.close(pid_write)
    with os.fdopen(pid_read) as f:
        job = int(f.readline())
    if variant.serve:
        from pydantic import TypeAdapter

        from shared.channel import Channel
        from shared.protocol import Ready

        chan = Channel(socket.socket(fileno=read))
        ready, _ = chan.recv(TypeAdapter(Ready))
        facts = {"rehearsal_ms": ready.startup.rehearsal_ms}
    else:
        facts = json.loads(os.fdopen(read).readline())
    time.sleep(0.2)
    if variant.depth == 2:
        ms = kill_and_time(job, lambda: gone(job))
    else:
        ms = kill_and_time(pid, lambda: os.waitpid(pid, os.WNOHANG)[0] == pid)
    os.waitpid(pid, 0) if variant.depth == 2 else None
    if variant.serve:
        chan.close()
    return facts, ms


def run_zygote(variant: Variant, env: dict[str, str], cwd: str) -> tuple[dict, float]:
    """The job process as ``worker_host.zygote.spawn`` makes it; killed (with the namespace's
    init, where there is one) once ready; timed until the outer process hears it is gone."""
    from pydantic import TypeAdapter

    from shared.channel import Channel
    from shared.protocol import HOST_REPLIES, Exited, Ready, Spawn, Spawned, Started
    from worker_host import zygote

    os.environ.clear()
    os.environ.update({**env, **POOL_ENV, "KES_DEVICE": DEVICE, **variant.env})
    scratch = tempfile.mkdtemp(dir=cwd)
    os.chmod(scratch, 0o777)
    request = Spawn(scratch=scratch, hidden=[], writable=[], readable=[], uid=65534,
                    network=False, env={"HOME": scratch, "TMPDIR": "/tmp"}, scratch_mb=4096,
                    requested_at=time.monotonic())
    ours, theirs = socket.socketpair()
    server = Channel(ours)
    zygote.spawn(request, variant.zygote == "sandbox", Channel(theirs))
    reply, fds = server.recv(HOST_REPLIES)
    assert isinstance(reply, Spawned), reply
    ctrl, job, out = Channel(socket.socket(fileno=fds[0])), Channel(socket.socket(fileno=fds[1])), fds[2]
    started, _ = ctrl.recv(HOST_REPLIES)
    assert isinstance(started, Started), started
    ready, _ = job.recv(TypeAdapter(Ready))
    time.sleep(0.2)
    pids = [started.pid, *children_of(started.pid)]
    t = time.perf_counter()
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    exited, _ = ctrl.recv(HOST_REPLIES)
    ms = round((time.perf_counter() - t) * 1e3, 1)
    assert isinstance(exited, Exited), exited
    for chan in (ctrl, job, server):
        chan.close()
    os.close(out)
    theirs.close()
    with contextlib.suppress(ChildProcessError):
        os.waitpid(reply.outer_pid, 0)  # SIGCHLD is not ignored here, as it is in the zygote
    return {"rehearsal_ms": ready.startup.rehearsal_ms}, ms


def children_of(pid: int) -> list[int]:
    from orchestration.gpu_gate import children

    return children(pid)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", help="variants whose name contains one of these words "
                                       "(separated by commas)")
    parser.add_argument("--idle", type=int, default=6,
                        help="idle CUDA contexts beside the job process (a server's spares)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    env = {**os.environ, "CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    # this process becomes the zygote: it must never touch CUDA itself
    from worker_host.zygote import preload

    preload("cuda")
    gc.collect()
    gc.freeze()
    with open("/proc/self/status") as f:
        me = dict(line.split(":", 1) for line in f)
    result: dict[str, object] = {"zygote": {k: int(me[k].split()[0]) for k in
                                            ("VmPTE", "RssAnon", "RssFile", "VmRSS")}}
    result["idle_contexts"] = args.idle
    with idle_contexts(args.idle, env), tempfile.TemporaryDirectory() as cwd:
        chosen = {label: v for label, v in VARIANTS.items()
                  if not args.only or any(w in label for w in args.only.split(","))}
        runs: dict[str, list[tuple[dict, float]]] = {label: [] for label in chosen}
        for _ in range(args.repeats):  # variants interleaved: a slow spell hits them all
            for label, variant in chosen.items():
                run = (run_zygote if variant.zygote else
                       run_fork if variant.fork else run_exec)
                runs[label].append(run(variant, env, cwd))
    for label, rows in runs.items():
        row = {"exit_median_ms": statistics.median(r[1] for r in rows),
               "exit_ms": [r[1] for r in rows],
               "facts_median": {k: statistics.median(r[0][k] for r in rows)
                                for k in rows[0][0]}}
        result[label] = row
        print(label, json.dumps(row), flush=True)
    emit(result, args.out)

if __name__ == "__main__":
    main()
