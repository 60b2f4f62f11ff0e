"""Several jobs on one GPU (JOBS_PER_GPU): untimed requests side by side, a timing alone with
the other jobs' processes stopped, and no job's time spent waiting for another's."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from orchestration.executor import LocalExecutor
from orchestration.gpu_gate import GpuGate, freeze, process_tree, thaw
from orchestration.gpu_pool import DevicePool, Slot
from orchestration.job_step import Clock, JobStep, Side, Stage
from orchestration.placement import LocalSeat
from orchestration.worker_pool import PoolKey
from shared.models import GPUInfo
from shared.protocol import Done, Message, Trials
from shared.settings import Settings
from tests.unit.conftest import gpu_executor


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# ---- the gate


def test_shared_requests_run_together_and_an_exclusive_waits_for_them() -> None:
    events: list[str] = []

    async def scenario() -> None:
        gate = GpuGate()

        async def untimed(name: str, hold: float) -> None:
            async with gate.shared(name):
                events.append(f"{name} in")
                await asyncio.sleep(hold)
                events.append(f"{name} out")

        async def timing() -> None:
            await asyncio.sleep(0.01)  # after both untimed requests are in
            async with gate.exclusive("t"):
                events.append("t alone")
                assert gate.shared_in_flight() == 0

        await asyncio.gather(untimed("a", 0.05), untimed("b", 0.1), timing())

    run(scenario())
    assert events[:2] == ["a in", "b in"]  # side by side
    assert events.index("t alone") > events.index("b out")


def test_on_the_cpu_an_exclusive_does_not_wait_for_requests_in_flight() -> None:
    """A CPU gate does not drain: the request in flight (an import that sleeps for seconds)
    is paused by stopping its process, not waited for; new requests still wait."""
    events: list[str] = []

    async def scenario() -> None:
        gate = GpuGate(drain=False)
        inside, release = asyncio.Event(), asyncio.Event()

        async def slow_request() -> None:
            async with gate.shared("slow"):
                inside.set()
                await release.wait()
                events.append("slow out")

        async def timing() -> None:
            await inside.wait()
            async with gate.exclusive("t"):
                events.append(f"t alone, {gate.shared_in_flight()} in flight")
                later = asyncio.create_task(late_request())
                await asyncio.sleep(0)
                events.append("t done")
            release.set()
            await later

        async def late_request() -> None:
            async with gate.shared("late"):
                events.append("late in")

        await asyncio.gather(slow_request(), timing())

    run(scenario())
    assert events[0] == "t alone, 1 in flight"
    assert events.index("t done") < events.index("late in")


def test_a_waiting_exclusive_keeps_new_shared_requests_out() -> None:
    order: list[str] = []

    async def scenario() -> None:
        gate = GpuGate()

        async def first() -> None:
            async with gate.shared("a"):
                await asyncio.sleep(0.05)

        async def timing() -> None:
            await asyncio.sleep(0.01)
            async with gate.exclusive("t"):
                order.append("t")
                await asyncio.sleep(0.02)

        async def late() -> None:
            await asyncio.sleep(0.02)  # arrives while "t" waits for "a"
            async with gate.shared("c"):
                order.append("c")

        await asyncio.gather(first(), timing(), late())

    run(scenario())
    assert order == ["t", "c"]


def test_exclusives_are_granted_in_arrival_order_and_reentrant_for_their_owner() -> None:
    order: list[str] = []

    async def scenario() -> None:
        gate = GpuGate()

        async def timing(name: str, delay: float) -> None:
            await asyncio.sleep(delay)
            async with gate.exclusive(name):
                async with gate.exclusive(name), gate.shared(name):  # its own requests pass
                    order.append(name)
                await asyncio.sleep(0.01)

        await asyncio.wait_for(asyncio.gather(
            timing("x", 0.0), timing("y", 0.002), timing("z", 0.004)), 5)

    run(scenario())
    assert order == ["x", "y", "z"]


@pytest.mark.parametrize("frees_first", [False, True],
                         ids=["gives up, then the gpu frees", "the gpu frees as it gives up"])
def test_an_exclusive_waiter_that_gives_up_is_never_granted_and_blocks_no_one(
        frees_first: bool) -> None:
    async def scenario() -> str:
        gate = GpuGate()
        release = asyncio.Event()

        async def untimed() -> None:
            async with gate.shared("a"):
                await release.wait()

        holder = asyncio.create_task(untimed())
        await asyncio.sleep(0)
        waiter = asyncio.create_task(_hold_exclusive(gate, "t"))
        await asyncio.sleep(0.01)
        if frees_first:  # the holder runs first: it frees the GPU for one that gave up
            release.set()
            waiter.cancel()
        else:
            waiter.cancel()
            await asyncio.gather(waiter, return_exceptions=True)
            release.set()
        await asyncio.gather(holder, waiter, return_exceptions=True)
        assert holder.exception() is None
        async with gate.shared("b"):  # neither stuck behind the cancelled waiter
            pass
        async with gate.exclusive("u"):
            return "free"

    assert run(asyncio.wait_for(scenario(), 5)) == "free"


async def _hold_exclusive(gate: GpuGate, owner: str) -> None:
    async with gate.exclusive(owner):
        await asyncio.sleep(10)


# ---- stopping processes


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _tree() -> tuple[subprocess.Popen[bytes], list[int]]:
    proc = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"])
    deadline = time.monotonic() + 5
    while len(process_tree(proc.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    return proc, process_tree(proc.pid)


def test_freeze_stops_every_process_below_a_root_and_thaw_resumes_them() -> None:
    proc, pids = _tree()
    try:
        assert len(pids) == 3
        stopped, problems = freeze([proc.pid])
        assert problems == [] and sorted(stopped) == sorted(pids)
        assert {_state(p) for p in pids} == {"T"}
        thaw(stopped)
        deadline = time.monotonic() + 5
        while "T" in {_state(p) for p in pids} and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "T" not in {_state(p) for p in pids}
    finally:
        for pid in pids:
            subprocess.run(["kill", "-9", str(pid)], check=False)
        proc.wait()


def test_freeze_stops_a_starting_workers_tree_read_from_its_main_threads() -> None:
    proc, pids = _tree()
    try:
        stopped, problems = freeze([], harness_roots=[proc.pid])
        assert problems == [] and sorted(stopped) == sorted(pids)
        assert {_state(p) for p in pids} == {"T"}
    finally:
        thaw(pids)
        for pid in pids:
            subprocess.run(["kill", "-9", str(pid)], check=False)
        proc.wait()


THREAD_FORKS = """
import subprocess, sys, threading, time
def fork_and_stay():  # (a thread's children go to another thread of it when it ends)
    print(subprocess.Popen(["sleep", "30"]).pid, flush=True)
    time.sleep(30)
threading.Thread(target=fork_and_stay, daemon=True).start()
time.sleep(30)
"""


def test_a_child_forked_by_another_thread_is_found_only_by_the_every_thread_walk() -> None:
    # why user code's trees are walked thread by thread: a process may fork from any thread
    import sys

    proc = subprocess.Popen([sys.executable, "-c", THREAD_FORKS], stdout=subprocess.PIPE,
                            text=True)
    child = 0
    try:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        assert child in process_tree(proc.pid)
        assert child not in process_tree(proc.pid, every_thread=False)
        stopped, problems = freeze([proc.pid])
        assert problems == [] and child in stopped and _state(child) == "T"
        thaw(stopped)
    finally:
        proc.kill()
        proc.wait()
        if child:
            subprocess.run(["kill", "-9", str(child)], check=False)


# ---- the placement with two jobs on one GPU


class FakeWorker:
    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.status: int | None = None
        self.calls: list[float] = []

    async def call(self, message: Message, fds: list[int] | None = None) -> tuple[Message, list[int]]:
        self.calls.append(time.monotonic())
        await asyncio.sleep(0.01)
        return Done(), []


async def _progress(text: str, fraction: float) -> None:
    return None


def on_gpu(ex: LocalExecutor, workers: list[Any], left: float = 60.0) -> LocalSeat:
    step = JobStep()
    step.deadline = time.monotonic() + left
    step.gate_allowance_s = left
    index = len(ex.placement.on_device.get(PoolKey(0), {}))
    seat = ex.placement.seat(Slot(index, 0), step, Clock(), _progress, 0)
    seat.held.extend(workers)
    return seat


async def _request(seat: LocalSeat, worker: Any) -> None:
    await seat.call(worker, Side.KERNEL, Stage.RUNNING, Trials(first=0, count=1), Done)


def test_a_job_alone_on_its_gpu_stops_the_other_jobs_processes_and_holds_their_requests(
        tmp_path: Path) -> None:
    ex = gpu_executor(tmp_path, jobs_per_gpu=2, spares_per_gpu=0)
    proc, pids = _tree()
    other = FakeWorker(proc.pid)
    mine = FakeWorker(None)
    a = on_gpu(ex, [mine])
    b = on_gpu(ex, [other])
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        async def timed() -> None:
            async with a.alone():
                seen["states"] = {_state(p) for p in pids}
                await _request(a, mine)
                await asyncio.sleep(0.2)
                seen["left_at_end"] = time.monotonic()

        async def untimed() -> None:
            await asyncio.sleep(0.05)
            await _request(b, other)

        await asyncio.gather(timed(), untimed())

    try:
        before = b.step.deadline
        run(scenario())
        assert seen["states"] == {"T"}  # the other job's whole tree stopped
        assert "T" not in {_state(p) for p in pids}  # and going on after
        assert other.calls[0] >= seen["left_at_end"]  # its request waited for the timing
        assert b.step.deadline is not None and before is not None
        assert b.step.deadline - before >= 0.1  # the wait is not the other job's time
        assert b.step.gate_waiting_since is None
    finally:
        for pid in pids:
            subprocess.run(["kill", "-9", str(pid)], check=False)
        proc.wait()
        ex.placement.workers.blocking.close()


def test_an_idle_judge_stays_stopped_from_the_first_timing_until_it_is_resumed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ex = gpu_executor(tmp_path, spares_per_gpu=0)
    proc, pids = _tree()
    judge = FakeWorker(proc.pid)
    ex.placement.idle_with_user_code = lambda key: [judge]  # type: ignore[list-item,assignment]
    seat = on_gpu(ex, [FakeWorker(None)])
    frozen: list[list[int]] = []
    real_freeze = freeze

    def counted(roots: list[int]) -> tuple[list[int], list[str]]:
        frozen.append(list(roots))
        return real_freeze(roots)

    monkeypatch.setattr("orchestration.placement.freeze", counted)
    states: list[set[str]] = []

    async def scenario() -> None:
        for _ in range(2):
            async with seat.alone():
                states.append({_state(p) for p in pids})
            states.append({_state(p) for p in pids})
        ex.placement.idle_with_user_code = lambda key: []  # leased: no longer idle
        await seat.resume(judge)  # type: ignore[arg-type]

    try:
        run(scenario())
        assert states == [{"T"}] * 4  # stopped in each timing, and between them
        assert frozen == [[proc.pid]]  # stopped once, by the first
        assert judge not in ex.placement.kept_stopped
        deadline = time.monotonic() + 5
        while "T" in {_state(p) for p in pids} and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "T" not in {_state(p) for p in pids}  # running again once resumed
    finally:
        for pid in pids:
            subprocess.run(["kill", "-9", str(pid)], check=False)
        proc.wait()
        ex.placement.workers.blocking.close()


def test_a_deadline_moves_by_a_wait_at_the_gate_only_up_to_the_allowance() -> None:
    step = JobStep()
    step.deadline = time.monotonic() + 10
    step.gate_allowance_s = 0.05
    step.gate_wait_began()
    time.sleep(0.1)
    assert step.time_left() == pytest.approx(10 - 0.1 + 0.05, abs=0.03)
    step.gate_wait_ended()
    assert step.time_left() == pytest.approx(10 - 0.1 + 0.05, abs=0.03)
    assert step.gate_waited_s >= 0.1


def test_a_job_blocked_behind_another_does_not_time_out_but_one_running_long_does(
        tmp_path: Path) -> None:
    ex = gpu_executor(tmp_path, jobs_per_gpu=2, spares_per_gpu=0)
    a = on_gpu(ex, [])
    worker = FakeWorker(None)
    b = on_gpu(ex, [worker], left=0.1)
    b.step.gate_allowance_s = 1.0  # it may wait up to 1 s for others

    async def one_request() -> str:
        await _request(b, worker)
        return "done"

    async def blocked() -> str:
        async with a.alone():
            waiting = asyncio.create_task(ex._within(one_request(), b.step))
            await asyncio.sleep(0.3)  # three times b's timeout
        return await waiting

    async def slow() -> str:
        return await ex._within(_sleeps(0.3), b.step)

    assert run(blocked()) == "done"
    b.step.deadline = time.monotonic() + 0.1
    with pytest.raises(asyncio.TimeoutError):
        run(slow())
    ex.placement.workers.blocking.close()


async def _sleeps(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "done"


def test_a_finished_job_lets_its_workers_go_only_once_no_other_job_has_the_gpu_alone(
        tmp_path: Path) -> None:
    ex = gpu_executor(tmp_path, jobs_per_gpu=2, spares_per_gpu=0)
    a = on_gpu(ex, [])
    b = on_gpu(ex, [])
    order: list[str] = []

    async def scenario() -> None:
        async def timing() -> None:
            async with a.alone():
                await asyncio.sleep(0.1)
                order.append("timing done")

        async def finishing() -> None:
            await asyncio.sleep(0.02)
            await b.until_no_one_alone()
            order.append("workers let go")

        await asyncio.gather(timing(), finishing())
        await a.until_no_one_alone()  # its own alone (over) or none: at once
        order.append("own")

    run(scenario())
    ex.placement.workers.blocking.close()
    assert order == ["timing done", "workers let go", "own"]


def test_two_gpus_sharing_jobs_get_slots_gpu_by_gpu(tmp_path: Path) -> None:
    from orchestration.device_probe import DeviceInfo
    from orchestration.job_manager import JobManager
    from orchestration.job_store import JobStore

    settings = Settings(job_dir=tmp_path / "jobs", job_store_path=tmp_path / "jobs.sqlite3",
                        build_cache_dir=tmp_path / "cache", ref_cache_dir=tmp_path / "refs",
                        jobs_per_gpu=2)
    gpus = [GPUInfo(id=i, name="NVIDIA H200", memory_total_mb=143771) for i in (0, 1)]
    store = JobStore(settings.job_store_path)
    manager = JobManager(settings, DeviceInfo(device="cuda", gpus=gpus), store)
    executor = manager.executor
    assert isinstance(executor, LocalExecutor)
    assert [s.gpu_id for s in executor.placement.slots.slots] == [0, 1, 0, 1]
    executor.placement.workers.blocking.close()
    store.close()


# ---- slots


def test_a_gpu_with_two_job_slots_counts_as_busy_while_either_holds_it() -> None:
    async def scenario() -> dict[int | None, float]:
        pool = DevicePool([Slot(0, 0), Slot(1, 1), Slot(2, 0), Slot(3, 1)])
        first = await pool.acquire()
        second = await pool.acquire()
        third = await pool.acquire()
        assert (first.gpu_id, second.gpu_id, third.gpu_id) == (0, 1, 0)  # spread first
        pool.release(second)  # GPU 1 idle from here
        await asyncio.sleep(0.2)
        pool.release(first)  # GPU 0 still held by the third
        await asyncio.sleep(0.2)
        return {slot.gpu_id: share for slot, share in pool.busy_shares().items()}

    shares = run(scenario())
    assert set(shares) == {0, 1}
    assert shares[0] > 0.9  # held throughout, by one job or two
    assert shares[1] < 0.2


def test_waiting_counts_the_callers_blocked_on_a_slot_until_served_or_cancelled() -> None:
    async def scenario() -> list[int]:
        pool = DevicePool([Slot(0, 0)])
        held = await pool.acquire()
        counts = [pool.waiting()]
        first = asyncio.create_task(pool.acquire())
        second = asyncio.create_task(pool.acquire())
        await asyncio.sleep(0)
        counts.append(pool.waiting())
        second.cancel()
        await asyncio.gather(second, return_exceptions=True)
        counts.append(pool.waiting())
        pool.release(held)
        await first
        counts.append(pool.waiting())
        return counts

    assert run(scenario()) == [0, 2, 1, 0]
