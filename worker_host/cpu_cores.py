"""In CPU mode a job process runs on as many cores as it has torch threads, for good.

The CPU is the device there, and a comparison times the reference inside its judge and the
candidate in the kernel's process, each on :func:`harness.process.cpu_threads` torch threads
(one unless ``OMP_NUM_THREADS`` says otherwise). A thread count is the process's own to
change: a candidate that raised it, or started threads or processes of its own, would run on
more cores than the reference it is compared with and read a speedup of up to the host's core
count for the same work. So each job process is held to that many cores
(:func:`hold_to_cores`), before any user code: its affinity is those CPUs, which its threads
and children inherit, and a seccomp filter answers ``sched_setaffinity`` with EPERM, so no
code in it or in its children can widen the set again. (The filter also refuses every system
call made through another architecture's entry, such as the 32-bit one of an x86-64 host,
which has a ``sched_setaffinity`` of its own.) Threads beyond those cores share them.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import struct

from worker_host.sandbox import PR_SET_NO_NEW_PRIVS

PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
EPERM = 1
X32_SYSCALL_BIT = 0x40000000
# (audit architecture, sched_setaffinity's number) per machine
ARCHES = {"x86_64": (0xC000003E, 203), "aarch64": (0xC00000B7, 122)}
# classic BPF
LD_W_ABS = 0x20
ALU_AND_K = 0x54
JEQ_K = 0x15
RET_K = 0x06
NR_OFFSET, ARCH_OFFSET = 0, 4  # in struct seccomp_data


class CoreHoldError(OSError):
    """The process could not be held to its cores."""


def cores_for(pid: int, allowed: set[int], count: int) -> set[int]:
    """The ``count`` cores a process ``pid`` is held to, among ``allowed`` (all of them where
    there are no more): consecutive from a place picked by pid, so that jobs' processes are
    not all on the same cores outside their timings (a timing has the CPU to itself in any
    case: the other jobs' processes are stopped meanwhile)."""
    cores = sorted(allowed)
    if count >= len(cores):
        return set(cores)
    first = pid % len(cores)
    return {cores[(first + i) % len(cores)] for i in range(count)}


def affinity_filter(machine: str) -> bytes:
    """The seccomp program (``struct sock_filter`` array) that refuses ``sched_setaffinity``
    on ``machine`` and every call through another architecture's entry."""
    if machine not in ARCHES:
        raise CoreHoldError(0, f"no seccomp filter is known for {machine}")
    arch, nr = ARCHES[machine]
    deny = SECCOMP_RET_ERRNO | EPERM
    program = [
        (LD_W_ABS, 0, 0, ARCH_OFFSET),
        (JEQ_K, 1, 0, arch),  # this machine's entry: on; another's: refused
        (RET_K, 0, 0, deny),
        (LD_W_ABS, 0, 0, NR_OFFSET),
        (ALU_AND_K, 0, 0, ~X32_SYSCALL_BIT & 0xFFFFFFFF),  # x32 calls carry that bit
        (JEQ_K, 0, 1, nr),
        (RET_K, 0, 0, deny),
        (RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]
    return b"".join(struct.pack("HBBI", *op) for op in program)


def hold_to_cores(count: int) -> set[int]:
    """Hold this process, its threads and its children to ``count`` cores for good; the
    cores. Raises :class:`CoreHoldError` where the host (a container's own seccomp profile, a
    sandboxed kernel) refuses the affinity or the filter."""
    try:
        cores = cores_for(os.getpid(), os.sched_getaffinity(0), count)
        os.sched_setaffinity(0, cores)
    except OSError as exc:
        raise CoreHoldError(exc.errno or 0, f"setting the CPU affinity: {exc}") from exc
    forbid_affinity_changes()
    return cores


def forbid_affinity_changes() -> None:
    """From here on ``sched_setaffinity`` answers EPERM to every thread of this process and
    of its children (a seccomp filter: nothing can lift it). Raises :class:`CoreHoldError`
    where the host refuses the filter."""
    program = affinity_filter(platform.machine())
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(program, len(program))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    for args, what in (((PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs"),
                       ((PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0),
                        "seccomp filter")):
        if libc.prctl(*args) != 0:
            err = ctypes.get_errno()
            raise CoreHoldError(err, f"{what}: {os.strerror(err)}")


def hold_threads(cores: set[int]) -> dict[int, set[int]]:
    """Hold every thread of this process to ``cores`` (the threads they start inherit it);
    each thread's affinity before, for :func:`release_threads`. A host-bound call (one that
    waits for the device from inside, then launches the rest of its work) runs as fast as
    its host thread, which runs slower, and differently from one process to the next, when
    the scheduler moves it between cores (docs/ENGINE.md, "Host-bound calls")."""
    before: dict[int, set[int]] = {}
    for name in os.listdir("/proc/self/task"):
        tid = int(name)
        try:
            before[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, cores)
        except OSError:  # a thread that ended meanwhile; or a host that refuses
            before.pop(tid, None)
    return before


def release_threads(before: dict[int, set[int]]) -> None:
    """Put back the affinities :func:`hold_threads` changed (threads since gone skipped)."""
    for tid, cores in before.items():
        try:
            os.sched_setaffinity(tid, cores)
        except OSError:
            pass
    held = set().union(*before.values()) if before else None
    if held:
        for name in os.listdir("/proc/self/task"):  # threads started while held
            if int(name) not in before:
                try:
                    os.sched_setaffinity(int(name), held)
                except OSError:
                    pass


def yield_for_good(cores: set[int]) -> int:
    """Every thread of this process held to ``cores`` and moved to the idle scheduling class
    (SCHED_IDLE: it runs only when no other thread wants its core), and the threads and
    processes it starts with them, for good: the process's RLIMIT_NICE goes to 0, and
    without CAP_SYS_NICE (which no job process has) a thread can then not leave that class;
    nor those cores, which no thread of it or of its children can change from here on
    (:func:`forbid_affinity_changes`, where the host lets it). Called before any user code
    runs in the process. The threads moved."""
    import resource

    hold_threads(cores)
    with contextlib.suppress(OSError, ValueError):
        resource.setrlimit(resource.RLIMIT_NICE, (0, 0))
    with contextlib.suppress(CoreHoldError):
        forbid_affinity_changes()
    moved = 0
    for name in os.listdir("/proc/self/task"):
        try:
            os.sched_setscheduler(int(name), os.SCHED_IDLE, os.sched_param(0))
            moved += 1
        except OSError:  # a thread that ended meanwhile; or a host that refuses
            continue
    return moved
