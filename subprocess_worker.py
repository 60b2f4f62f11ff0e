"""The job process: one side of one job, in a sandbox, driven over typed channels.

    python subprocess_worker.py --probe <file>    write what this host's worker stack can do

Job processes are not started from the command line: the zygote (:mod:`worker_host.zygote`)
forks them and calls :func:`serve`. A job process first gets ready with no user code in it
(CUDA context, the in-process timer bound: :func:`harness.timer.bind`, a rehearsal of every
step a job takes), says so, then obeys the server's operations one at a time
(:mod:`shared.protocol`) and exits when told or when its channel closes.

Its role comes with its first :class:`~shared.protocol.Load` or
:class:`~shared.protocol.Pair`:

- ``judge`` (:mod:`judge.session`): the reference of a comparison, its checker and the clock
  of the kernel's samples. The kernel under test is never imported here.
- ``kernel`` (:mod:`kernel_side.session`): the kernel under test. Paired with a judge, it
  also answers the judge's requests on the pair channel (a second socket, watched beside the
  server's).
- ``build`` (:mod:`kernel_side.build`): the CPU build stage of torch_cuda sources.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.process import prepare_process
from shared.channel import PAIR_SPIN_S, Channel, ChannelClosed, ProtocolError, wait_readable
from shared.job_files import write_atomic
from shared.protocol import (
    BUILD_PROCESS_ENV,
    PAIR_REQUESTS,
    REHEARSE_ALL,
    REHEARSE_ALONE,
    REHEARSE_ENV,
    SERVER_REQUESTS,
    Audited,
    Exit,
    Failure,
    Incorrect,
    InternalError,
    KernelTimed,
    Load,
    Message,
    Pair,
    PartnerFailed,
    PartnerGone,
    Ready,
    Role,
    SelfTimed,
    Spawn,
    Startup,
    Unpair,
)

if TYPE_CHECKING:
    from shared.models import WorkerJob

DEVICE_ENV = "KES_DEVICE"
# Cached, unused GPU memory a process returns to the driver after a phase that needed more
# than the next ones (timing, the audit), where it is more than RELEASE_CACHED_BYTES and the
# GPU has less than RELEASE_BELOW_FREE_SHARE of its memory free: with plenty free, keeping it
# costs the other processes nothing, and giving it back costs this one (the next request
# waits for the release, then allocates again: ~0.1 s a job on the H100 for 256 MB inputs).
# Done after the reply is sent, outside the judge's and the server's clocks.
RELEASE_CACHED_BYTES = 64 * 2**20
RELEASE_BELOW_FREE_SHARE = 0.5
RELEASE_AFTER = (KernelTimed, Audited, SelfTimed)
# The answers that say a step of the rehearsal went wrong.
REHEARSAL_FAILED = (InternalError, Failure, Incorrect, PartnerFailed, PartnerGone)


class Worker:
    """One job process's state: its device, its timer, its session once its role is known,
    and (for a kernel's process) the pair channel to its judge."""

    def __init__(self, device: str) -> None:
        from harness.timer import bind

        self.device = device
        self.timer = bind(device)  # before any user code: see harness.timer
        self.session: Any = None
        self.role: Role | None = None
        self.pair: Channel | None = None

    def session_for(self, role: Role) -> Any:
        if self.session is None:
            self.role = role
            if role == Role.JUDGE:
                from judge.session import JudgeSession

                self.session = JudgeSession(self.device, self.timer)
            elif role == Role.KERNEL:
                from kernel_side.session import KernelSession

                self.session = KernelSession(self.device, self.timer)
            else:
                self.session = _BuildSession()
        elif role != self.role:
            raise ValueError(f"this process is a {self.role}; it cannot also be a {role}")
        return self.session

    def from_server(self, message: Message, fds: list[int]) -> Message:
        if isinstance(message, Load):
            return self.session_for(message.role).handle(message, fds)
        if isinstance(message, Pair):
            session = self.session_for(message.role)
            if message.role == Role.KERNEL:
                if len(fds) != 1:
                    raise ValueError("a pairing needs the descriptor of its channel")
                self.drop_pair()
                self.pair = Channel.from_fd(fds.pop())
                if message.yield_cores:
                    from worker_host.cpu_cores import yield_for_good

                    yield_for_good(set(message.yield_cores))
                from shared.protocol import Done

                return Done()
            return session.handle(message, fds)
        if self.session is None:
            raise ValueError(f"{type(message).__name__} before this process was given a role")
        return self.session.handle(message, fds)

    def from_judge(self, message: Message, fds: list[int]) -> Message | None:
        if isinstance(message, Unpair):
            self.drop_pair()
            return None
        return self.session.handle(message, fds)

    def polls(self) -> bool:
        """Whether this process polls its pair channel between a judge's calls."""
        return self.pair is not None and getattr(self.session, "polls", True)

    def drop_pair(self) -> None:
        if self.pair is not None:
            self.pair.close()
            self.pair = None
        if self.session is not None and hasattr(self.session, "unpair") and self.role == Role.KERNEL:
            self.session.unpair()

    def release_cached_memory(self) -> None:
        """Give the GPU memory torch's allocator keeps cached back to the driver: the paired
        process allocates outside this allocator."""
        if self.device != "cuda":
            return
        import torch

        if must_release(torch.cuda.memory_reserved() - torch.cuda.memory_allocated(),
                        *torch.cuda.mem_get_info()):
            torch.cuda.synchronize()
            torch.cuda.empty_cache()


def must_release(cached_unused: int, free: int, total: int) -> bool:
    """Whether a process gives its cached GPU memory back (see RELEASE_CACHED_BYTES)."""
    return cached_unused > RELEASE_CACHED_BYTES and free < RELEASE_BELOW_FREE_SHARE * total


class _BuildSession:
    def handle(self, message: Message, fds: list[int]) -> Message:
        if not isinstance(message, Load):
            raise TypeError(f"a build process does not do {type(message).__name__}")
        from kernel_side.build import build

        return build(message, Path.cwd() / "build")


def answer(handle: Any, message: Message, fds: list[int]) -> Message | None:
    """``handle``'s reply; a fault of the harness itself as :class:`InternalError`."""
    try:
        return handle(message, fds)
    except Exception:  # noqa: BLE001 - a fault of the harness, reported as such
        return InternalError(message="internal error in the worker:\n" + traceback.format_exc())
    finally:
        for fd in fds:
            _close(fd)


def serve(chan: Channel, spawn: Spawn) -> int:
    """Get ready without user code, then obey the server (and a judge) until told to exit."""
    device = os.environ.get(DEVICE_ENV, "cpu")
    forked_ms = (time.monotonic() - spawn.requested_at) * 1e3
    started = time.perf_counter()
    prepare_process(device, build=os.environ.get(BUILD_PROCESS_ENV) == "1")
    context_ms = (time.perf_counter() - started) * 1e3
    worker = Worker(device)
    timer_ms = (time.perf_counter() - started) * 1e3 - context_ms
    rehearsal_ms = rehearse(device, worker.timer)
    # Bound before any user code: a kernel that patches Channel (or pydantic, or sockets)
    # later cannot rewrite what this loop sends. Its receivers still check every reply.
    send, recv, wait = chan.send, chan.recv, wait_readable
    spin_s = PAIR_SPIN_S if device == "cuda" else 0.0
    send(Ready(pid=os.getpid(), startup=Startup(
        fork_sandbox_ms=round(forked_ms, 1), context_ms=round(context_ms, 1),
        timer_ms=round(timer_ms, 1), rehearsal_ms=round(rehearsal_ms, 1))))
    while True:
        watched = [chan.fileno()] + ([worker.pair.fileno()] if worker.pair is not None else [])
        # paired: poll a while before sleeping, so a judge's call finds this process awake
        # (not while another timed process shares its core: its calls would lose that time)
        readable = wait(watched, spin_s if worker.polls() else 0.0)
        if worker.pair is not None and worker.pair.fileno() in readable:
            pair = worker.pair
            try:
                request, fds = pair.recv(PAIR_REQUESTS)
            except (ChannelClosed, ProtocolError, OSError):
                worker.drop_pair()
            else:
                reply = answer(worker.from_judge, request, fds)
                if reply is not None:
                    try:
                        pair.send(reply)
                    except OSError:
                        worker.drop_pair()
            continue
        try:
            message, fds = recv(SERVER_REQUESTS)
        except ChannelClosed:
            return 0
        if isinstance(message, Exit):
            return 0
        reply = answer(worker.from_server, message, fds)
        assert reply is not None
        send(reply)
        if isinstance(reply, RELEASE_AFTER):
            worker.release_cached_memory()


REHEARSAL_SOURCE = "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"


def rehearse(device: str, timer: Any) -> float:
    """Take the harness's own trivial comparison and evaluation through every step a job
    takes; ms spent.

    A freshly forked process pays once for whatever it touches first: copy-on-write pages of
    the zygote's heap, pydantic's and torch's lazy set-up, the kernels a job's bookkeeping
    launches (inputs, fingerprints, the comparison), the arena's mapping. Paid here, before
    the worker says it is ready, none of it lands in a job's time. No user code is involved,
    and nothing of the rehearsal stays: its sessions, modules and files are dropped.

    Where :data:`REHEARSE_ENV` says ``alone`` (a spare made for /evaluate and /validate), only
    the kernel-alone path: the comparison's half (a judge, an arena, its paired kernel) is
    most of the rehearsal's driver work, which slows the exit of the job process gone before
    it, and ~190 MB of memory the process's own exit must free (docs/WORKER_DESIGN.md). On a
    GPU the comparison's half is not rehearsed either: played in one process, the hand-over's
    two sides share one CUDA context and one interpreter lock, and a launch that blocks on
    one side holds up the other (a spare's start hung so); only the judge's check of a
    trial's outputs is rehearsed there (:func:`_rehearse_checks`), and a comparison's other
    first steps run cold, in its untimed stages.
    """
    from shared.models import WorkerJob

    started = time.perf_counter()
    home = Path.cwd()
    stage = home / ".rehearsal"
    # three calls take every path of a warm-up; 50 ms of calls, three times over, would only
    # keep a core (or the GPU, beside another job's work) busy
    warmup_s, timer.warmup_s = timer.warmup_s, 0.0
    kernel = {"source_code": REHEARSAL_SOURCE, "kernel_type": "torch",
              "io": {"args": [{"name": "x", "type": "tensor", "role": "input",
                               "tensor_spec": {"shape": [256], "dtype": "float32",
                                               "init": {"kind": "randn"}}}]}}
    job = WorkerJob.model_validate({"job_id": "rehearsal", "kind": "compare", "device": device,
                                    "cache_dir": str(stage), "num_correct_trials": 1,
                                    "kernel": kernel, "ref_kernel": kernel})
    try:
        stage.mkdir(exist_ok=True)
        os.chdir(stage)
        if os.environ.get(REHEARSE_ENV, REHEARSE_ALL) != REHEARSE_ALONE:
            if device == "cuda":
                _rehearse_checks(device)
            else:
                _rehearse_comparison(device, timer, job)
        _rehearse_alone(device, timer, job)
    except Exception:  # noqa: BLE001 - a job would meet the same fault and report it
        traceback.print_exc()
    finally:
        timer.warmup_s = warmup_s
        os.chdir(home)
        for name in [n for n in sys.modules if n.startswith("kernel_")
                     and n not in ("kernel_side", "kernel_eval_client")
                     and not n.startswith(("kernel_side.", "kernel_eval_client."))]:
            del sys.modules[name]
        shutil.rmtree(stage, ignore_errors=True)
        if device == "cuda":
            import torch

            from harness import device_memory

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            device_memory.peak_bytes = 0
    return (time.perf_counter() - started) * 1e3


def _rehearse_comparison(device: str, timer: Any, job: WorkerJob) -> None:
    """A judge and its paired kernel, in this process, through a comparison's every step."""
    from judge.session import JudgeSession
    from kernel_side.session import KernelSession
    from shared.protocol import (
        Audit,
        Calibrate,
        PrepareSamples,
        TimeKernel,
        Trials,
    )

    judge, side = JudgeSession(device, timer), KernelSession(device, timer)
    _expect(judge.load(Load(job=job, role=Role.JUDGE), []))
    ours, theirs = socket.socketpair()
    _expect(judge.handle(Pair(role=Role.JUDGE, secret=1), [ours.detach()]))
    thread = threading.Thread(target=_serve_pair, args=(side, Channel(theirs), device),
                              daemon=True)
    thread.start()
    _expect(judge.handle(Calibrate(), []))
    _expect(side.load(Load(job=job, role=Role.KERNEL), []))
    _expect(judge.handle(Trials(first=0, count=2), []))
    _expect(judge.handle(PrepareSamples(num_trials=3), []))
    _expect(judge.handle(TimeKernel(num_trials=3), []))
    _expect(judge.handle(Audit(), []))
    _expect(judge.handle(Unpair(), []))
    thread.join(5)


CHECKED_DTYPES = ("float32", "float16", "bfloat16")


def _rehearse_checks(device: str) -> None:
    """A judge's check of a trial's outputs against the reference's
    (:func:`validation.compare.compare_outputs`), once for each common floating dtype: the
    kernels it launches are loaded here, not inside a comparison's first trial (on a GPU, where
    the comparison's half is not rehearsed)."""
    import torch

    from validation.compare import compare_outputs

    for name in CHECKED_DTYPES:
        want = torch.linspace(-1.0, 1.0, 256, device=device).to(getattr(torch, name))
        problem = compare_outputs([want.clone()], [want])
        if problem is not None:
            raise RuntimeError(f"the rehearsed check of {name} outputs failed: {problem}")


def _rehearse_alone(device: str, timer: Any, job: WorkerJob) -> None:
    """A kernel alone, as /evaluate takes it: loaded, run once, timed by its own process."""
    from kernel_side.session import KernelSession
    from shared.protocol import RunOnce, TimeSelf

    alone = KernelSession(device, timer)
    _expect(alone.load(Load(job=job.model_copy(update={"kind": "evaluate", "ref_kernel": None}),
                            role=Role.KERNEL), []))
    _expect(alone.handle(RunOnce(), []))
    _expect(alone.handle(TimeSelf(num_trials=3), []))


def _serve_pair(side: Any, channel: Channel, device: str) -> None:
    if device == "cuda":
        # A stream of its own (one that never waits for the legacy stream): the two sides of
        # a hand-over must not share a stream, as they do not in two processes
        import torch

        torch.cuda.set_stream(torch.cuda.Stream())
    while True:
        try:
            request, fds = channel.recv(PAIR_REQUESTS)
        except (ChannelClosed, ProtocolError, OSError):
            break
        if isinstance(request, Unpair):
            break
        reply = answer(side.handle, request, fds)
        if reply is not None:
            channel.send(reply)
    channel.close()
    side.unpair()


class RehearsalFailed(RuntimeError):
    """A step of the rehearsal answered with a failure."""


def _expect(reply: Message) -> None:
    if isinstance(reply, REHEARSAL_FAILED):
        raise RehearsalFailed(f"the rehearsal's step answered {reply!r}")


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def probe(out: Path) -> None:
    """Write what this worker environment can do: device, GPUs, available kernel types."""
    from profiling.gpu_state import nvml_uuid

    info: dict[str, Any] = {"cuda": False, "gpus": [], "torch": None, "errors": []}
    try:
        import torch

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["cuda"] = True
            for i in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(i)
                uuid = str(getattr(props, "uuid", "") or "")
                info["gpus"].append({
                    "id": i, "name": props.name, "memory_total_mb": props.total_memory // 2**20,
                    "uuid": nvml_uuid(uuid) if uuid else None,
                })
                info.setdefault("capability", f"{props.major}.{props.minor}")
    except Exception as exc:  # noqa: BLE001 - the server reports this in /health
        info["errors"].append(f"torch: {exc}")
    from shared.languages import import_errors, versions

    info["languages"] = versions()  # the kernel languages this environment can import
    if info["cuda"]:  # (none runs on the CPU: no interpreter per language to start there)
        info["language_import_errors"] = import_errors()
    write_atomic(out, json.dumps(info))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--probe", type=Path, required=True)
    args = parser.parse_args(argv)
    probe(args.probe)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
