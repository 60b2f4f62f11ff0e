"""GPU mode: a timed process holds its threads to one core per GPU while it is timed, the same
core for the reference's process and the candidate's (orchestration.placement.timing_core,
worker_host.cpu_cores.hold_threads), and lets them go after."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from orchestration.placement import timing_core
from tests.conftest import ROOT


def test_each_gpu_gets_a_core_of_its_own_share():
    cores = set(range(16))
    picked = [timing_core(i, 4, cores) for i in range(4)]
    assert picked == [1, 5, 9, 13]
    assert len({timing_core(i, 8, set(range(128))) for i in range(8)}) == 8


def test_more_gpus_than_cores_still_names_an_allowed_core():
    cores = {2, 3}
    assert {timing_core(i, 4, cores) for i in range(4)} <= cores


def test_the_core_comes_from_the_allowed_set_not_from_numbering():
    assert timing_core(0, 1, {40, 41, 42, 43}) == 41


HELD = """
import json, os, threading
from worker_host.cpu_cores import hold_threads, release_threads
everything = os.sched_getaffinity(0)
stop = threading.Event()
worker = threading.Thread(target=stop.wait); worker.start()
core = min(everything)
before = hold_threads({core})
seen = {"held": sorted({tuple(sorted(os.sched_getaffinity(int(t)))) for t in os.listdir("/proc/self/task")})}
late = threading.Thread(target=lambda: seen.setdefault("late", sorted(os.sched_getaffinity(0)))); late.start(); late.join()
release_threads(before)
seen["after"] = sorted({tuple(sorted(os.sched_getaffinity(int(t)))) for t in os.listdir("/proc/self/task")})
seen["everything"] = sorted(everything); seen["core"] = core
stop.set(); worker.join()
print(json.dumps(seen))
"""


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity"), reason="Linux only")
def test_hold_threads_holds_every_thread_and_release_puts_them_back():
    out = subprocess.run([sys.executable, "-c", HELD], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True)
    seen = json.loads(out.stdout)
    assert seen["held"] == [[seen["core"]]]  # the main thread and the one already running
    assert seen["late"] == [seen["core"]]  # a thread started while held inherits the core
    assert seen["after"] == [seen["everything"]]
