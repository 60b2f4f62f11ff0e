"""A timed request (orchestration.placement.LocalSeat.timed, flows.timing.measured): made on a
settled device, measured again when the first reading was disturbed."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from orchestration.flows.timing import assess_with, measured
from orchestration.gpu_pool import Slot
from orchestration.job_step import Clock, JobStep, Side, Stage
from orchestration.placement import LocalSeat
from orchestration.worker_pool import PoolKey
from profiling.integrity import TimingVerdict
from shared.protocol import Message, Resources, SelfTimed, TimeSelf, TimingReport
from tests.unit.conftest import gpu_executor


class Worker:
    pid = None
    status = None

    def __init__(self, replies: list[SelfTimed], seen: list[dict[str, Any]] | None = None,
                 pool: Any = None) -> None:
        self.replies = replies
        self.seen = seen if seen is not None else []
        self.pool = pool

    async def call(self, message: Message, fds: list[int] | None = None) -> tuple[Message, list[int]]:
        if self.pool is not None:
            self.seen.append({"quiet": self.pool._quiet.get(PoolKey(0), 0),
                              "starting": self.pool._starting.get(PoolKey(0), 0)})
        return self.replies[0], []


def timed(event_ms: float, host_ms: float, busy_ms: float = 0.004) -> SelfTimed:
    return SelfTimed(timing=TimingReport(method="cuda_event+l2_flush", event_ms=[event_ms],
                                         host_sync_ms=[host_ms], device_busy_ms=busy_ms),
                     resources=Resources())


async def _progress(text: str, fraction: float) -> None:
    return None


def seat_of(tmp_path: Path, left: float = 60.0, **settings: Any) -> tuple[Any, LocalSeat]:
    ex = gpu_executor(tmp_path, spares_per_gpu=2, **settings)
    step = JobStep()
    step.deadline = time.monotonic() + left
    return ex, ex.placement.seat(Slot(0, 0), step, Clock(), _progress, 0)


def test_a_timing_stops_the_workers_still_starting_and_lets_them_go_on_after(
        tmp_path: Path) -> None:
    """The timing waits for none of them: their whole process trees are stopped while it runs
    (no core taken, nothing launched) and resumed after."""
    import subprocess

    from orchestration.gpu_gate import process_tree

    ex, seat = seat_of(tmp_path)
    pool = ex.placement.workers
    proc = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"])
    deadline = time.monotonic() + 5
    while len(process_tree(proc.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    tree = process_tree(proc.pid)
    states: list[set[str]] = []

    class Observer(Worker):
        async def call(self, message: Message, fds: list[int] | None = None) -> tuple[Message, list[int]]:
            states.append({_state(p) for p in tree})
            return self.replies[0], []

    async def scenario() -> float:
        pool._starting_roots[PoolKey(0)] = {proc.pid}  # a spare creating its context
        pool._starting[PoolKey(0)] = 1
        began = time.monotonic()
        await seat.timed(Observer([timed(0.0045, 0.03)]), Side.ALONE, Stage.TIMING,  # type: ignore[arg-type]
                         TimeSelf(), SelfTimed)
        pool._starting_roots[PoolKey(0)] = set()
        pool._starting[PoolKey(0)] = 0
        pool._closed = True  # the quiet's end would start the spares: not in a unit test
        return time.monotonic() - began

    try:
        took = asyncio.run(scenario())
        assert states == [{"T"}]  # stopped, all of them, while the timing ran
        assert {_state(p) for p in tree} != {"T"}  # going on after
        assert took < 5.0  # it did not wait for the start to finish (it would wait 10 s)
    finally:
        proc.kill()
        subprocess.run(["pkill", "-P", str(proc.pid)], check=False)
        proc.wait()
        pool.blocking.close()


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_a_short_job_waits_at_most_a_quarter_of_its_remaining_time(tmp_path: Path) -> None:
    settles: list[float] = []
    for left in (4.0, 600.0):
        ex, seat = seat_of(tmp_path, left)

        async def departed(key: PoolKey, wait_s: float) -> None:
            settles.append(wait_s)

        ex.placement.workers.departed = departed  # type: ignore[method-assign]

        async def scenario(seat: LocalSeat) -> None:
            await seat.timed(Worker([timed(0.0045, 0.03)]), Side.ALONE,  # type: ignore[arg-type]
                             Stage.TIMING, TimeSelf(), SelfTimed)

        asyncio.run(scenario(seat))
        ex.placement.workers.blocking.close()
    assert 0.9 <= settles[0] <= 1.0  # a quarter of the 4 s left
    assert settles[1] == pytest.approx(10.0, abs=0.05)  # a long job: the full settle


class ScriptedSeat:
    def __init__(self, replies: list[SelfTimed]) -> None:
        self.replies = list(replies)
        self.settles: list[float | None] = []

    async def timed(self, worker: Any, side: Side, stage: Stage, message: Message,
                    expected: Any, settle_s: float | None = None) -> tuple[Any, Any]:
        from orchestration.placement import Observed

        self.settles.append(settle_s)
        return self.replies.pop(0), Observed(1.0)


def test_a_host_bound_reading_is_measured_again_and_the_second_reading_stands() -> None:
    """A 5 us kernel whose host interval read 0.115 ms once (the host busy for a moment) is
    not reported at 0.115 ms: the second reading, on a settled device, stands."""
    seat = ScriptedSeat([timed(0.0045, 0.115), timed(0.0045, 0.03)])
    _, verdict, _ = asyncio.run(measured(seat, None, Side.ALONE, TimeSelf(num_trials=1),  # type: ignore[arg-type]
                                         SelfTimed, assess_with(1, "cuda"),
                                         again=TimingVerdict.worth_measuring_again))
    assert len(seat.settles) == 2 and seat.settles[1] is not None
    assert not verdict.host_bound and verdict.stats.median == pytest.approx(0.0045)
    assert any(c.startswith("measured again") and "host-bound" in c for c in verdict.report.checks)


def test_an_undisturbed_reading_is_taken_once() -> None:
    seat = ScriptedSeat([timed(0.0045, 0.02)])
    _, verdict, _ = asyncio.run(measured(seat, None, Side.ALONE, TimeSelf(num_trials=1),  # type: ignore[arg-type]
                                         SelfTimed, assess_with(1, "cuda"),
                                         again=TimingVerdict.worth_measuring_again))
    assert len(seat.settles) == 1 and not verdict.report.suspicious


def scripted_verdicts(*kinds: str) -> Any:
    """A verdict per reading: "host-bound", "host-bound+disturbed", "flagged" or "clean"."""
    from profiling.integrity import HOST_BOUND_CHECK, TimingVerdict
    from shared.models import IntegrityReport, RuntimeStats

    left = list(kinds)

    def verdict_of(reply: object, remeasured: str | None) -> TimingVerdict:
        kind = left.pop(0)
        report = IntegrityReport(checks=[f"{HOST_BOUND_CHECK}: ..."] if "host" in kind else [],
                                 suspicious="flagged" in kind,
                                 reasons=["hidden work"] if "flagged" in kind else [])
        if remeasured:
            report.checks.append(f"measured again: {remeasured}")
        stats = RuntimeStats(mean=1, std=0, min=1, max=1, median=1, percentile_95=1,
                             percentile_99=1, num_samples=1, method="m", device="cuda")
        return TimingVerdict(stats, report, host_bound="host" in kind,
                             disturbed="disturbed" in kind)
    return verdict_of


def test_a_second_reading_the_hosts_state_moved_under_is_taken_a_third_time() -> None:
    seat = ScriptedSeat([timed(0.03, 0.1)] * 3)
    _, verdict, _ = asyncio.run(measured(
        seat, None, Side.ALONE, TimeSelf(num_trials=1), SelfTimed,  # type: ignore[arg-type]
        verdict_of=scripted_verdicts("host-bound", "host-bound+disturbed", "clean"),
        again=TimingVerdict.worth_measuring_again))
    assert len(seat.settles) == 3 and not verdict.host_bound
    assert any("reading 3" in c for c in verdict.report.checks)


def test_a_second_reading_that_is_host_bound_again_is_taken_a_third_time() -> None:
    """An honest 3 us relu on the H100 read host-bound twice in a row (28x its time): the
    third reading's verdict stands."""
    seat = ScriptedSeat([timed(0.03, 0.1)] * 3)
    _, verdict, _ = asyncio.run(measured(
        seat, None, Side.ALONE, TimeSelf(num_trials=1), SelfTimed,  # type: ignore[arg-type]
        verdict_of=scripted_verdicts("host-bound", "host-bound", "clean"),
        again=TimingVerdict.worth_measuring_again))
    assert len(seat.settles) == 3 and not verdict.host_bound


def test_a_flagged_second_reading_stands() -> None:
    seat = ScriptedSeat([timed(0.03, 0.1)] * 3)
    _, verdict, _ = asyncio.run(measured(
        seat, None, Side.ALONE, TimeSelf(num_trials=1), SelfTimed,  # type: ignore[arg-type]
        verdict_of=scripted_verdicts("flagged", "flagged", "clean"),
        again=TimingVerdict.worth_measuring_again))
    assert len(seat.settles) == 2 and verdict.report.suspicious


def test_no_more_than_three_readings_however_disturbed() -> None:
    seat = ScriptedSeat([timed(0.03, 0.1)] * 4)
    _, verdict, _ = asyncio.run(measured(
        seat, None, Side.ALONE, TimeSelf(num_trials=1), SelfTimed,  # type: ignore[arg-type]
        verdict_of=scripted_verdicts(*["host-bound+disturbed"] * 4),
        again=TimingVerdict.worth_measuring_again))
    assert len(seat.settles) == 3 and verdict.host_bound and verdict.disturbed


def test_a_reading_without_a_reason_to_take_it_again_is_taken_once_however_it_reads() -> None:
    """A candidate's judged reading is its figure: the flow asks for no second reading."""
    seat = ScriptedSeat([timed(0.03, 0.1)] * 3)
    _, verdict, _ = asyncio.run(measured(
        seat, None, Side.ALONE, TimeSelf(num_trials=1), SelfTimed,  # type: ignore[arg-type]
        scripted_verdicts("host-bound+disturbed", "clean")))
    assert len(seat.settles) == 1 and verdict.host_bound
