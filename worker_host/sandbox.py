"""The worker sandbox: Linux namespaces a freshly forked worker enters before any user code.

A worker is forked by the zygote (:mod:`worker_host.zygote`). The fork first calls
:func:`unshare_namespaces` (new mount, pid and IPC namespaces, a new network namespace unless
the operator allows the network, and a user namespace when the server is not root), then forks
the job process, which is pid 1 of the new pid namespace and calls :func:`enter`:

- a fresh ``/proc``: the server, the zygote and every other worker are invisible, so they
  cannot be signalled, traced or read through ``/proc``;
- a private ``/tmp`` and ``/dev/shm``; the job root, the job store's directory and any other
  ``hidden`` directory are covered by empty read-only tmpfs;
- every other mount read-only, except the worker's own scratch directory (and, for the build
  stage, the build cache);
- no network, loopback included (a new network namespace has only a loopback that is down);
- when the server runs as root: the worker drops to an unprivileged uid (65534, ``Settings.sandbox_uid``);
  otherwise it drops every capability it held in its user namespace. Either way
  ``no_new_privs`` is set, so nothing it executes regains privileges.

This is the same isolation ``bwrap --unshare-all --ro-bind / /`` gives, done after a fork so
the worker keeps the imported torch and starts in milliseconds.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
from collections.abc import Callable
from dataclasses import dataclass, field

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
ST_RELATIME = 4096

PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
PR_SET_PDEATHSIG = 1
CAP_LAST = 63

# Mount points that stay as they are: kernel interfaces and device nodes (GPUs must open).
_KEEP_WRITABLE_PREFIXES = ("/proc", "/sys", "/dev")


class SandboxError(OSError):
    """A namespace or mount step failed; the worker cannot be isolated as configured."""


@dataclass(frozen=True)
class SandboxSpec:
    scratch: str  # the worker's own directory: the one place it may write (besides /tmp)
    hidden: tuple[str, ...] = ()  # directories covered by an empty tmpfs
    writable: tuple[str, ...] = ()  # further directories left writable (the build stage's cache)
    readable: tuple[str, ...] = ()  # directories shown read-only even inside a hidden one
    # files (device nodes) that read as /dev/null: the build stage's view of the GPUs
    masked: tuple[str, ...] = ()
    uid: int = 65534  # the uid (and gid) a root server's workers run as
    network: bool = False  # keep the host's network
    # each of the worker's writable places in memory (its scratch, /tmp, /dev/shm) holds at
    # most this much: a kernel filling them can fill neither the server's disk nor its memory
    scratch_mb: int = 4096
    extra_env: dict[str, str] = field(default_factory=dict)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise SandboxError(err, f"{what}: {os.strerror(err)}")


def die_with_parent(sig: int = 9) -> None:
    """Have the kernel kill this process when its parent dies."""
    _libc().prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)


OOM_SCORE_ADJ_MAX = 1000
CGROUP_ROOT = "/sys/fs/cgroup"
TASK_GROUP_PREFIX = "kes-worker-"


def task_group_parent(cgroup_root: str = CGROUP_ROOT, own: str = "/proc/self/cgroup") -> str | None:
    """The directory of this process's cgroup in a pids controller it may add children to
    (cgroup v1's ``pids`` hierarchy, or v2 where ``pids`` is enabled below this cgroup), or
    None where there is none."""
    try:
        with open(own) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy != "0" and "pids" in controllers.split(","):
            base = os.path.join(cgroup_root, "pids", path.lstrip("/"))
        elif hierarchy == "0" and controllers == "":
            base = os.path.join(cgroup_root, path.lstrip("/"))
            try:
                with open(os.path.join(base, "cgroup.subtree_control")) as f:
                    if "pids" not in f.read().split():
                        continue
            except OSError:
                continue
        else:
            continue
        if os.path.isdir(base) and os.access(base, os.W_OK):
            return os.path.normpath(base)
    return None


def limit_tasks(parent: str, name: str, max_tasks: int) -> None:
    """Move this process (and so all it will fork) into a new cgroup ``name`` under ``parent``
    that holds at most ``max_tasks`` processes and threads: a fork bomb stops there, and the
    host's process table (often 32768 entries) keeps room for the server. Raises OSError where
    it cannot; a worker the server promised a limit to must not run without one."""
    group = os.path.join(parent, TASK_GROUP_PREFIX + name)
    try:
        os.makedirs(group, exist_ok=True)
        _write(os.path.join(group, "pids.max"), str(max_tasks))
        _write(os.path.join(group, "cgroup.procs"), str(os.getpid()))
    except OSError:
        with contextlib.suppress(OSError):
            os.rmdir(group)
        raise


def task_group_name(zygote: int, outer: int) -> str:
    """The task group of the worker whose outer process is ``outer``, forked by ``zygote``."""
    return f"{zygote}-{outer}"


def remove_ended_task_groups(parent: str | None) -> None:
    """Remove the task groups whose worker's outer process no longer runs (this zygote's
    finished workers, or a killed server's). A group is kept while its outer process runs, even
    empty: a worker just forked has made its group but not yet entered it. A group with a
    process left in it stays too (rmdir fails)."""
    if parent is None:
        return
    try:
        names = [n for n in os.listdir(parent) if n.startswith(TASK_GROUP_PREFIX)]
    except OSError:
        return
    for name in names:
        outer = name.removeprefix(TASK_GROUP_PREFIX).rpartition("-")[2]
        if not outer.isdigit() or _running(int(outer)):
            continue
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(parent, name))


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


BACKGROUND_NICE = 19


def in_the_background() -> None:
    """Run this process (and all it forks) at the lowest CPU priority, for good: nice 19,
    with a nice limit that lets it never go back (lowering one's nice value needs a nice
    limit above 0 or CAP_SYS_NICE, which a worker does not keep).

    For the build stage: it runs a source's module code, and nvcc, beside other jobs'
    timings, and whatever its threads do, a timed process that wants a core gets it first.
    """
    resource.setrlimit(resource.RLIMIT_NICE, (0, 0))
    os.setpriority(os.PRIO_PROCESS, 0, BACKGROUND_NICE)


def first_for_the_oom_killer() -> None:
    """Make this process (and all it forks) the kernel's first choice when memory runs out.

    A kernel that exhausts host memory must not cost the server or the zygote: at the
    highest adjustment every job process outranks them, whatever their sizes. Raising
    one's own score needs no privilege.
    """
    try:
        _write("/proc/self/oom_score_adj", str(OOM_SCORE_ADJ_MAX))
    except OSError:  # no /proc: nothing to adjust
        pass


def unshare_namespaces(spec: SandboxSpec) -> None:
    """In the forked worker, before it forks its job process: leave the server's namespaces."""
    libc = _libc()
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC
    if not spec.network:
        flags |= CLONE_NEWNET
    rootless = os.geteuid() != 0
    if rootless:
        flags |= CLONE_NEWUSER
    _check(libc.unshare(flags), "unshare")
    if rootless:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"0 {uid} 1")
        _write("/proc/self/gid_map", f"0 {gid} 1")


def enter(spec: SandboxSpec, as_root_server: bool) -> None:
    """In the job process (pid 1 of the new pid namespace): set up the view, drop privileges."""
    libc = _libc()

    def mount(source: str | None, target: str, fstype: str | None, flags: int,
              data: str | None = None) -> None:
        _check(libc.mount(_b(source), _b(target), _b(fstype), ctypes.c_ulong(flags), _b(data)),
               f"mount {target}")

    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    keep = [spec.scratch, *spec.writable]
    for path in keep:
        os.makedirs(path, exist_ok=True)
    shown = [p for p in spec.readable if os.path.isdir(p) and p not in keep]
    # Handles first: once /tmp or a hidden directory is covered, paths under it are gone.
    handles = {os.path.normpath(p): os.open(p, os.O_PATH | os.O_DIRECTORY) for p in (*shown, *keep)}
    covered: list[str] = []
    size = f"size={max(1, int(spec.scratch_mb))}m"
    for path in ("/tmp", "/dev/shm"):
        mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,{size}")
    # The most specific rule wins: outer paths first, so a directory shown inside a hidden
    # one (the build cache beside the job store) is seen, and a directory hidden inside a
    # shown one (the job root inside a checkout under /tmp) is not.
    rules = [(p, "cover") for p in {os.path.normpath(h) for h in spec.hidden}]
    rules += [(p, "show") for p in handles]
    for path, action in sorted(rules, key=lambda r: (r[0].count("/"), r[1] == "show")):
        if action == "cover":
            if os.path.isdir(path):  # else already out of view
                mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
                covered.append(path)
        else:
            os.makedirs(path, exist_ok=True)  # inside a covering tmpfs, if one hid it
            mount(f"/proc/self/fd/{handles[path]}", path, None, MS_BIND | MS_REC)
    for fd in handles.values():
        os.close(fd)
    _mask(spec.masked, mount)
    # The scratch directory itself is a tmpfs of bounded size: what the kernel writes there
    # never reaches the server's disk, and is gone with the worker.
    mount("tmpfs", spec.scratch, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=0755,{size}")
    skip = {os.path.normpath(p) for p in (*keep, "/tmp", "/dev/shm")}
    for point in _mount_points():
        if point in skip or any(
            point == p or point.startswith(p + "/") for p in _KEEP_WRITABLE_PREFIXES
        ):
            continue
        try:
            flags = _locked_flags(point)
        except OSError:
            continue
        # Best effort per mount: a few (e.g. autofs) refuse, and hold nothing to protect.
        libc.mount(None, _b(point), None, ctypes.c_ulong(MS_REMOUNT | MS_BIND | MS_RDONLY | flags), None)
    for path in covered:
        libc.mount(None, _b(path), None,
                   ctypes.c_ulong(MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV), None)
    if as_root_server:
        for path in keep:
            os.chown(path, spec.uid, spec.uid)
        os.chmod("/tmp", 0o1777)
        os.setgroups([])
        os.setresgid(spec.uid, spec.uid, spec.uid)
        os.setresuid(spec.uid, spec.uid, spec.uid)
    else:
        _drop_capabilities(libc)
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def _mask(files: tuple[str, ...], mount: Callable[..., None]) -> None:
    """Bind /dev/null over each of ``files`` that exists (a device node then opens as
    /dev/null: reads nothing, takes writes, answers no ioctl)."""
    for path in files:
        if os.path.exists(path) and not os.path.isdir(path):
            mount("/dev/null", path, None, MS_BIND)


def run_in_sandbox(spec: SandboxSpec, as_root_server: bool, look: Callable[[], str]) -> str:
    """Fork, enter ``spec`` as a worker does (namespaces, then the job process), run ``look``
    there and return its answer, or ``"error: ..."`` naming the step that failed."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            unshare_namespaces(spec)
            inner = os.fork()
            if inner == 0:
                try:
                    enter(spec, as_root_server)
                    answer = look()
                except BaseException as exc:  # noqa: BLE001 - the answer says what failed
                    answer = f"error: {exc}"
                os.write(write_fd, answer.encode())
                os._exit(0)
            os.waitpid(inner, 0)
        except BaseException as exc:  # noqa: BLE001
            os.write(write_fd, f"error: {exc}".encode()[:2000])
        os._exit(0)
    os.close(write_fd)
    received = b""
    while chunk := os.read(read_fd, 65536):
        received += chunk
    os.close(read_fd)
    os.waitpid(pid, 0)
    return received.decode(errors="replace")


def _outermost(paths: list[str]) -> list[str]:
    """``paths`` without those inside another of them (binding the parent shows them)."""
    norm = sorted({os.path.normpath(p) for p in paths}, key=len)
    out: list[str] = []
    for p in norm:
        if not any(p == q or p.startswith(q + "/") for q in out):
            out.append(p)
    return out


def code_paths(prefixes: tuple[str, ...] = ("/tmp/", "/dev/shm/")) -> list[str]:
    """Where this interpreter loads code from, if the worker's view would hide it.

    Modules are imported lazily, after the sandbox, so these must stay importable: a virtual
    environment or a checkout under /tmp (a CI clone, a GPU host's wheel directory), which the
    worker's private /tmp covers, and an interpreter inside a directory the worker's uid may
    not enter (pyenv under root's 0700 home), which :func:`closed_ancestors` covers.
    """
    import sys

    candidates = [sys.prefix, sys.base_prefix, *sys.path]
    return _outermost([p for p in candidates if p and os.path.isdir(p)
                       and (p.startswith(prefixes) or closed_ancestors([p]))])


def closed_ancestors(paths: list[str]) -> list[str]:
    """The outermost directories above ``paths`` that other users may not enter.

    A root server's workers run as another uid; covering such a directory with an open tmpfs
    and showing the code paths inside it again lets them import from there, and nothing else.
    """
    closed = []
    for path in paths:
        parts = os.path.normpath(path).split("/")[1:]
        for i in range(1, len(parts)):
            ancestor = "/" + "/".join(parts[:i])
            try:
                if not os.stat(ancestor).st_mode & 0o001:
                    closed.append(ancestor)
                    break
            except OSError:
                break
    return _outermost(closed)


def _drop_capabilities(libc: ctypes.CDLL) -> None:
    for cap in range(CAP_LAST + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the kernel's last cap

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    header = Header(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (Data * 2)()
    _check(libc.capset(ctypes.byref(header), data), "capset")


def _mount_points() -> list[str]:
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 4:
                points.append(_unescape(parts[4]))
    # Children after parents, so a parent's remount never hides a child we still need.
    return sorted(set(points), key=len)


def _locked_flags(point: str) -> int:
    """The flags a remount must keep (a user namespace may not clear them)."""
    st = os.statvfs(point)
    flags = 0
    for st_flag, ms_flag in ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV),
                             (os.ST_NOEXEC, MS_NOEXEC), (os.ST_NOATIME, MS_NOATIME),
                             (os.ST_NODIRATIME, MS_NODIRATIME), (ST_RELATIME, MS_RELATIME)):
        if st.f_flag & st_flag:
            flags |= ms_flag
    return flags


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 3 < len(text) and text[i + 1:i + 4].isdigit():
            out.append(chr(int(text[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _b(text: str | None) -> bytes | None:
    return None if text is None else text.encode()
