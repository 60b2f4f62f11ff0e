"""The zygote: a fork server that has imported the heavy stack, and forks one worker per job.

    python -m worker_host.zygote <fd>

The server starts one zygote per GPU (one for all slots in CPU mode, one for the build stage)
with a Unix socket on descriptor ``fd``. The zygote imports torch, Triton, CuPy and the
harness, but never touches CUDA (a CUDA context does not survive a fork). On ``spawn`` it
forks; the fork enters the sandbox's namespaces (:mod:`worker_host.sandbox`) and forks the
job process, which sets up its view of the file system, creates its CUDA context, tells the
server it is ready and waits for its one job. The zygote hands the server three descriptors
per worker: a control socket on which the sandbox's outer process reports the job process's
pid and, later, its wait status (trusted: no user code runs there); the job socket; and the
read end of the job process's stdout+stderr.

One job's code never shares a process with another job's: every worker serves one job (or,
for /compare, one side of it) and exits.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import socket
import sys
import traceback

from shared.channel import Channel, ChannelClosed
from shared.protocol import (
    HOST_REQUESTS,
    Exited,
    InternalError,
    Spawn,
    Spawned,
    Started,
    ZygoteReady,
)
from worker_host import sandbox

# Read before any fork enters a user namespace, where every server looks like uid 0.
SERVER_IS_ROOT = os.geteuid() == 0


def preload(device: str) -> None:
    """Import everything a job may need, so a forked worker imports nothing heavy."""
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch  # noqa: F401

    import subprocess_worker  # noqa: F401 - the job runtime
    from harness import process

    process.warm_cpu_math()  # before any fork: see harness.process.VML_FUNCTIONS

    # Nothing here may initialise CUDA (torch.profiler, for one, may start CUPTI on import).
    # (torch._dynamo: a TorchDispatchMode imports it on first use, as the judge's FLOP count
    # does once per reference, and so does torch.compile: 0.7 s of a job on a 2-core host)
    for optional in ("triton", "triton.language", "cupy", "nvtx", "numpy", "cupti.cupti",
                     "torch._dynamo"):
        with contextlib.suppress(Exception):  # a missing optional stack is reported per job
            __import__(optional)
    for module in ("compilation.registry", "compilation.base", "numpy.random",
                    "compilation.torch_backend", "compilation.triton_backend",
                    "compilation.torch_cuda_backend", "compilation.cuda_backend",
                    "compilation.multi_kernel_backend", "validation.compare",
                    "harness.arena", "harness.timer", "harness.inputs", "judge.session",
                    "kernel_side.session", "io_contract.tensor_utils"):
        with contextlib.suppress(Exception):  # the job that needs it reports the error
            __import__(module)


def probe_isolation(spec_dir: str, hidden: tuple[str, ...], uid: int) -> tuple[str, str]:
    """Try the sandbox once in a throwaway fork: ("namespaces[+uid]", "") or ("none", why)."""
    spec = sandbox.SandboxSpec(scratch=spec_dir, hidden=hidden, uid=uid)
    answer = sandbox.run_in_sandbox(spec, SERVER_IS_ROOT, lambda: "ok")
    if answer == "ok":
        return ("namespaces+uid" if SERVER_IS_ROOT else "namespaces"), ""
    return "none", answer or "the sandbox probe died"


def probe_task_limit(max_tasks: int) -> str | None:
    """The cgroup that workers' task groups go under, or None: no limit asked for, no pids
    controller this process may use, or a throwaway fork could not enter a group there (then
    /health says there is no limit, and no worker is promised one it cannot have)."""
    parent = sandbox.task_group_parent() if max_tasks > 0 else None
    if parent is None:
        return None
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            sandbox.limit_tasks(parent, sandbox.task_group_name(os.getppid(), os.getpid()),
                                max_tasks)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    with contextlib.suppress(OSError):
        os.rmdir(os.path.join(parent, sandbox.TASK_GROUP_PREFIX
                              + sandbox.task_group_name(os.getpid(), pid)))
    return parent if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else None


def spawn(request: Spawn, isolated: bool, server: Channel, task_parent: str | None = None,
          max_tasks: int = 0) -> None:
    """Fork one worker and hand its three descriptors to the server. The worker's cgroup,
    holding at most ``max_tasks`` tasks, goes under ``task_parent`` (None: no limit)."""
    ctrl_parent, ctrl_child = socket.socketpair()
    job_parent, job_child = socket.socketpair()
    out_read, out_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the sandbox's outer process
        code = 1
        try:
            server.close()
            ctrl_parent.close()
            job_parent.close()
            os.close(out_read)
            sandbox.die_with_parent()
            sandbox.first_for_the_oom_killer()
            if request.background:
                sandbox.in_the_background()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            ctrl = Channel(ctrl_child)
            if task_parent is not None:
                try:
                    sandbox.limit_tasks(task_parent, sandbox.task_group_name(
                        os.getppid(), os.getpid()), max_tasks)
                except OSError as exc:
                    ctrl.send(InternalError(
                        message=f"could not enter its group of {max_tasks} tasks: {exc}"))
                    raise
            code = _outer(request, isolated, ctrl, job_child, out_write)
        finally:
            os._exit(code)
    ctrl_child.close()
    job_child.close()
    os.close(out_write)
    server.send(Spawned(outer_pid=pid), [ctrl_parent.fileno(), job_parent.fileno(), out_read])
    ctrl_parent.close()
    job_parent.close()
    os.close(out_read)


def _outer(request: Spawn, isolated: bool, ctrl: Channel, job_sock: socket.socket,
           out_write: int) -> int:
    hidden = tuple(request.hidden)
    # Never a code path inside a hidden directory (the zygote's own cwd, the work root, is on
    # sys.path when it runs with -m): that would show every worker's scratch.
    code_paths = [p for p in sandbox.code_paths()
                  if not any(p == h or p.startswith(h.rstrip("/") + "/") for h in hidden)]
    # A root server's workers run as another uid: every directory they are shown (the code,
    # the build cache) must be reachable through the directories above it (root's 0700 home).
    closed = sandbox.closed_ancestors([*code_paths, *request.readable, *request.writable]) \
        if SERVER_IS_ROOT else []
    spec = sandbox.SandboxSpec(
        scratch=request.scratch, hidden=(*hidden, *closed), writable=tuple(request.writable),
        readable=(*request.readable, *code_paths), masked=tuple(request.masked),
        uid=request.uid, network=request.network, scratch_mb=request.scratch_mb,
    )
    try:
        if isolated:
            sandbox.unshare_namespaces(spec)
        else:
            os.makedirs(spec.scratch, exist_ok=True)
    except OSError as exc:
        ctrl.send(InternalError(message=f"could not enter the sandbox: {exc}"))
        return 1
    pid = os.fork()
    if pid == 0:  # the job process
        code = 70
        try:
            ctrl.close()
            sandbox.die_with_parent()
            os.dup2(out_write, 1)
            os.dup2(out_write, 2)
            os.close(out_write)
            sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
            sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
            if isolated:
                sandbox.enter(spec, as_root_server=SERVER_IS_ROOT)
                # a change of uid (a root server's workers) cleared the parent-death signal:
                # without it, this process outlives its outer process, and one the server
                # holds stopped (an idle judge) would never notice the server is gone
                sandbox.die_with_parent()
                _become_init()
            inherited = os.environ.get("CUPY_CACHE_DIR", "")
            for key, value in request.env.items():
                os.environ[key] = value
            # CuPy may keep the cache directory it saw when the zygote imported it: make that
            # one exist (in this worker's private /tmp) as well as the worker's own.
            for cache in {inherited, os.environ.get("CUPY_CACHE_DIR", ""), _cupy_cache_dir()} - {""}:
                with contextlib.suppress(OSError):  # outside /tmp and the scratch: read-only
                    os.makedirs(cache, exist_ok=True)
            os.chdir(spec.scratch)
            import subprocess_worker

            code = subprocess_worker.serve(Channel(job_sock), request)
        except BaseException:  # noqa: BLE001 - reported on the job's output, then exit
            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    job_sock.close()
    os.close(out_write)
    ctrl.send(Started(pid=pid))
    _, status, usage = os.wait4(pid, 0)
    if isolated and os.WIFEXITED(status) and os.WEXITSTATUS(status) >= 128:
        status = os.WEXITSTATUS(status) - 128  # the job died of this signal (see _become_init)
    ctrl.send(Exited(status=status, max_rss_bytes=int(usage.ru_maxrss) * 1024))
    return 0


def _cupy_cache_dir() -> str:
    try:
        from cupy.cuda import compiler

        return str(compiler.get_cache_dir())
    except Exception:  # noqa: BLE001 - no CuPy, nothing to prepare
        return ""


def _become_init() -> None:
    """Fork: the job runs on as pid 2, this process stays pid 1 of the namespace and reaps.

    A namespace's init ignores signals it has no handler for, even SIGKILL from inside, so a
    kernel that kills itself would live on as pid 1. The init passes on how its child ended:
    its exit code, or 128 + the signal that killed it.
    """
    child = os.fork()
    if child == 0:
        sandbox.die_with_parent()
        return
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    while True:
        pid, status = os.wait()
        if pid == child:
            break
    if os.WIFSIGNALED(status):
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status))


def main(argv: list[str]) -> int:
    sandbox.die_with_parent()
    server = Channel.from_fd(int(argv[0]))
    config = json.loads(os.environ.get("KES_ZYGOTE_CONFIG", "{}"))
    device = os.environ.get("KES_DEVICE", "cpu")
    try:
        preload(device)
    except BaseException:  # noqa: BLE001
        server.send(InternalError(
            message="the worker stack failed to import:\n" + traceback.format_exc()))
        return 1
    isolation, detail = "none", "disabled by SANDBOX=off"
    if config.get("sandbox", "auto") != "off":
        isolation, detail = probe_isolation(
            config["probe_dir"], tuple(config.get("hidden", ())), int(config.get("uid", 65534))
        )
    # Objects that exist now are never collected in a forked worker: its garbage collector
    # does not walk (and so copy) the zygote's heap.
    gc.collect()
    gc.freeze()
    max_tasks = int(config.get("max_tasks", 0))
    task_parent = probe_task_limit(max_tasks)
    sandbox.remove_ended_task_groups(task_parent)  # a killed server's
    server.send(ZygoteReady(isolation=isolation, detail=detail,
                            task_limit=max_tasks if task_parent else None))
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps outer processes
    try:
        while True:
            try:
                request, fds = server.recv(HOST_REQUESTS)
            except ChannelClosed:
                return 0
            for fd in fds:
                os.close(fd)
            if isinstance(request, Spawn):
                sandbox.remove_ended_task_groups(task_parent)
                spawn(request, isolation != "none", server, task_parent, max_tasks)
            else:
                return 0
    finally:
        sandbox.remove_ended_task_groups(task_parent)


if __name__ == "__main__":
    os._exit(main(sys.argv[1:]))
