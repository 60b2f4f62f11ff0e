"""A CPU-mode job process is held to as many cores as it has torch threads, for good
(worker_host.cpu_cores): a kernel that raised its thread count, or started threads or
processes, would otherwise run on more cores than its reference and read a speedup for the
same work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from worker_host.cpu_cores import CoreHoldError, cores_for, hold_to_cores

HELD = """
import ctypes, json, os, subprocess, sys, threading
from worker_host.cpu_cores import hold_to_cores
seen = {"cores": sorted(hold_to_cores(1)), "affinity": sorted(os.sched_getaffinity(0))}
try:
    os.sched_setaffinity(0, set(range(os.cpu_count())))
    seen["widen"] = "widened"
except PermissionError:
    seen["widen"] = "refused"
found = []
def in_thread():
    try:
        os.sched_setaffinity(0, set(range(os.cpu_count())))
        found.append("widened")
    except PermissionError:
        found.append("refused")
t = threading.Thread(target=in_thread)
t.start(); t.join()
seen["thread"] = found[0]
child = ("import os\\ntry:\\n    os.sched_setaffinity(0, set(range(os.cpu_count())))\\n"
         "    print('widened')\\nexcept PermissionError:\\n    print('refused')")
seen["child"] = subprocess.run([sys.executable, "-c", child], capture_output=True,
                               text=True).stdout.strip()
if os.uname().machine == "x86_64":  # sched_setaffinity through the x32 entry
    libc = ctypes.CDLL(None, use_errno=True)
    mask = ctypes.c_ulong(1)
    libc.syscall(0x40000000 | 203, 0, ctypes.sizeof(mask), ctypes.byref(mask))
    seen["x32_errno"] = ctypes.get_errno()
print(json.dumps(seen))
"""


def test_a_held_process_its_threads_and_its_children_cannot_widen_their_cpu_set() -> None:
    done = subprocess.run([sys.executable, "-c", HELD], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=True)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(seen["affinity"]) == 1 and seen["affinity"] == seen["cores"]
    assert (seen["widen"], seen["thread"], seen["child"]) == ("refused",) * 3
    assert seen.get("x32_errno", 1) == 1  # EPERM from the filter, not ENOSYS or success


@pytest.mark.parametrize(("allowed", "count", "held"), [
    ({0, 1}, 1, [{0}, {1}, {0}, {1}]),
    ({2, 5, 7}, 1, [{2}, {5}, {7}, {2}]),
    ({0, 1, 2, 3}, 2, [{0, 1}, {1, 2}, {2, 3}, {3, 0}]),
    ({0, 1}, 4, [{0, 1}] * 4),
])
def test_processes_are_spread_over_the_allowed_cores_by_pid(
        allowed: set[int], count: int, held: list[set[int]]) -> None:
    assert [cores_for(pid, allowed, count) for pid in range(4)] == held


def test_a_host_that_refuses_the_affinity_is_a_core_hold_error_not_a_crash(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(pid: int, cores: set[int]) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr("os.sched_setaffinity", refused)
    with pytest.raises(CoreHoldError, match="setting the CPU affinity"):
        hold_to_cores(1)


def fresh_python(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` run to its end by a new interpreter in the tree, OMP_NUM_THREADS unset."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=True)


def test_a_cpu_mode_process_the_host_will_not_hold_still_starts_and_says_why() -> None:
    code = ("import os\n"
            "def refused(pid, cores):\n    raise PermissionError(1, 'Operation not permitted')\n"
            "os.sched_setaffinity = refused\n"
            "from harness.process import prepare_process\n"
            "prepare_process('cpu'); print('started')")
    done = fresh_python(code)
    assert done.stdout.strip() == "started"
    assert "could not be held to 1 core(s)" in done.stderr


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: held or not reads alike")
def test_a_build_process_keeps_the_hosts_cores_and_threads() -> None:
    # the build stage's processes run nvcc and ninja: they keep the host's cores
    code = ("import os, torch; torch.set_num_threads(2)\n"
            "from harness.process import prepare_process\n"
            "prepare_process('cpu', build=True)\n"
            "print(len(os.sched_getaffinity(0)), torch.get_num_threads())")
    done = fresh_python(code)
    assert done.stdout.split() == [str(len(os.sched_getaffinity(0))), "2"], done.stderr


def test_only_the_build_pools_workers_are_told_they_are_build_processes(tmp_path: Path) -> None:
    from orchestration.worker_pool import PoolKey, WorkerPool
    from shared.protocol import BUILD_PROCESS_ENV
    from shared.settings import Settings

    gpu = WorkerPool(Settings(job_dir=tmp_path / "gpu"), "cuda")
    cpu = WorkerPool(Settings(job_dir=tmp_path / "cpu"), "cpu")
    try:
        assert gpu.zygote_env(PoolKey(None, build=True))[BUILD_PROCESS_ENV] == "1"
        assert cpu.zygote_env(PoolKey(None, build=True))[BUILD_PROCESS_ENV] == "1"
        assert gpu.zygote_env(PoolKey(0))[BUILD_PROCESS_ENV] == "0"
        assert cpu.zygote_env(PoolKey(None))[BUILD_PROCESS_ENV] == "0"
    finally:
        gpu.blocking.close()
        cpu.blocking.close()


YIELDED = """
import json, os, threading
from worker_host.cpu_cores import yield_for_good
if os.getuid() == 0:  # a job process has no CAP_SYS_NICE: neither does this one
    os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)
early = threading.Event(); stop = threading.Event()
def idle_thread():
    early.set(); stop.wait()
t = threading.Thread(target=idle_thread, daemon=True); t.start(); early.wait()
core = min(os.sched_getaffinity(0))
seen = {"moved": yield_for_good({core}), "self": os.sched_getscheduler(0),
        "affinity": sorted(os.sched_getaffinity(0)), "core": core,
        "earlier_thread": os.sched_getscheduler(t.native_id)}
later = []
t2 = threading.Thread(target=lambda: later.append(os.sched_getscheduler(0))); t2.start(); t2.join()
seen["later_thread"] = later[0]
try:
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    seen["leave"] = "left"
except PermissionError:
    seen["leave"] = "refused"
try:
    os.sched_setaffinity(0, set(range(os.cpu_count())))
    seen["cores"] = "changed"
except PermissionError:
    seen["cores"] = "refused"
stop.set(); t.join()
print(json.dumps(seen))
"""


def test_a_process_that_yields_for_good_runs_every_thread_idle_and_cannot_leave_nor_move(
        ) -> None:
    done = subprocess.run([sys.executable, "-c", YIELDED], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=True)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["moved"] >= 2
    assert seen["self"] == seen["earlier_thread"] == seen["later_thread"] == os.SCHED_IDLE
    assert seen["leave"] == "refused" and seen["cores"] == "refused"
    assert seen["affinity"] == [seen["core"]]
