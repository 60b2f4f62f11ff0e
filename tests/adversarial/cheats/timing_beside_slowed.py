"""Timing: slow the reference's samples where the two sides are timed in turn.

A reference whose calls are host-bound (more launches than the driver queues) is timed beside
the candidate: a fresh process of the reference and the candidate's process, both on the
timing core, take each sample in turn (judge/beside.py). What either process runs between
its own calls meets the other's.

Tries: two ways a candidate spends that,

- ``cpu_spin_child``: at import the kernel forks a child that spins on the CPU whenever the
  candidate is not inside its own call (a flag in shared memory), pinned to whatever core its
  parent runs on: the reference's host thread, which launches its calls, would get half of
  the core it shares with the candidate's process;
- ``gpu_left_running``: after each timed sample that the reference's follows (odd samples:
  the candidate first), the call leaves a GPU sleep of about a reference call running on a
  side stream its outputs do not wait for: the reference's next sample would share the
  device with it.

Caught by: the candidate's process is held to the timing core at idle priority, with every
thread and child it ever starts, from before its code is loaded (``Pair.yield_cores``): the
spinning child runs only while the reference's process does not want the core. And each
sample of a run taken in turn waits until a kernel of the judge's own runs at once
(``judge.beside.DeviceQuiet``): the device holds no work left running by the other side.
"""

from tests.adversarial.cheats.hooks import SEES_CALLS
from tests.adversarial.corpus import Cheat, Expect, Family, Job, Target, compare, torch_kernel

LAUNCHES = 6000  # small kernels a call: more than the driver queues, so the call is host-bound
X = {"args": [{"name": "x", "type": "tensor", "role": "input",
               "tensor_spec": {"shape": [4096], "dtype": "float32", "init": {"kind": "randn"}}}]}
BODY = f"""
    def forward(self, x):
        for _ in range({LAUNCHES}):
            x = x + 1.0
        return x
"""
REFERENCE = "class Model(torch.nn.Module):" + BODY
HONEST = "class ModelNew(torch.nn.Module):" + BODY

CPU_SPIN_CHILD = """
import mmap
import os
import struct

_flag = mmap.mmap(-1, 8)  # shared with the child: 1 while the candidate is inside its call


def _spin():
    parent = os.getppid()
    while True:
        try:
            os.sched_setaffinity(0, os.sched_getaffinity(parent))  # beside its parent
        except OSError:
            pass
        until = 0
        while struct.unpack_from("q", _flag, 0)[0] == 0 and until < 200000:
            until += 1  # busy: the core's time, while the other side's call runs
        if struct.unpack_from("q", _flag, 0)[0] == 1:
            os.sched_yield()


if os.fork() == 0:
    _spin()
    os._exit(0)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        struct.pack_into("q", _flag, 0, 1)
        try:
            for _ in range(@LAUNCHES@):
                x = x + 1.0
            return x
        finally:
            struct.pack_into("q", _flag, 0, 0)
""".replace("@LAUNCHES@", str(LAUNCHES))

GPU_LEFT_RUNNING = SEES_CALLS + """
_side = torch.cuda.Stream()
_CYCLES = 40_000_000  # about 20 ms at an H200's SM clock


class ModelNew(torch.nn.Module):
    def forward(self, x):
        for _ in range(@LAUNCHES@):
            x = x + 1.0
        # sample i is the _seen["samples"]-th of the reading: odd i, the reference's is next
        if _timed() and _seen["samples"] % 2 == 0:
            with torch.cuda.stream(_side):
                torch.cuda._sleep(_CYCLES)
        return x
""".replace("@LAUNCHES@", str(LAUNCHES))


def launch_bound(source: str):
    def build(target: Target) -> Job:
        return compare(torch_kernel(REFERENCE, X), torch_kernel(source, X),
                       trials=target.timing_trials, reuse_reference=False)
    return build


def case(name: str, source: str, tries: str, caught_by: str) -> Cheat:
    return Cheat(
        name=name,
        family=Family.TIMING,
        technique="other_side_slowed",
        tries=tries,
        caught_by=caught_by,
        build=launch_bound(source),
        honest=launch_bound(HONEST),
        gpu=True,
        expect=(Expect.BOUNDED, Expect.FLAGGED),
    )


CASES = (
    case("beside_cpu_spin_child", CPU_SPIN_CHILD,
         "a child forked at import spins on its parent's core whenever the candidate is not "
         "inside its own call: the reference's host-bound calls, timed in turn on that core, "
         "would get half of it",
         "the candidate's process and its children held to the timing core at idle priority "
         "from before its code is loaded"),
    case("beside_gpu_left_running", GPU_LEFT_RUNNING,
         "after each sample the reference's follows, a 20 ms GPU sleep left running on a side "
         "stream: the reference's sample would share the device with it",
         "each sample of a run taken in turn waits until the device is quiet"),
)
