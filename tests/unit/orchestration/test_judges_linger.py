"""Idle judges leave at a job's end, not in the middle of another job's timing: the exit of a
process disturbs its device (~0.15 s on an H100), and every timing waits for the exits under
way, so exits spread over a job are each waited for, and exits at its end once."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from orchestration.references import BUSY_LINGER_FACTOR, Judge, Judges
from orchestration.worker_pool import PoolKey
from shared.protocol import Loaded

GPU0 = PoolKey(0)
LINGER_S = 10.0


@dataclass
class FakeProcess:
    status: int | None = None
    killed: bool = False

    def kill(self) -> None:
        self.killed = True


@dataclass
class FakeWorkers:
    departed: list[Any] = field(default_factory=list)

    def depart(self, key: PoolKey, workers: list[Any]) -> None:
        self.departed += workers

    def release(self, worker: Any) -> None:
        pass


@dataclass
class FakePlacement:
    workers: FakeWorkers = field(default_factory=FakeWorkers)
    on_device: dict[PoolKey, dict[int, list[Any]]] = field(default_factory=dict)


def idle_judge(judges: Judges, key: str, idle_for_s: float) -> Judge:
    judge = Judge(FakeProcess(), key, Loaded(), GPU0)  # type: ignore[arg-type]
    judge.idle_since = time.monotonic() - idle_for_s
    judges._idle.setdefault((key, GPU0), []).append(judge)
    return judge


def test_an_expired_judge_waits_while_a_job_runs_on_its_device_and_leaves_when_idle() -> None:
    placement = FakePlacement(on_device={GPU0: {1: []}})
    judges = Judges(placement, linger_s=LINGER_S)  # type: ignore[arg-type]
    expired = idle_judge(judges, "a", LINGER_S + 1)
    judges._let_go(GPU0, time.monotonic(), busy=True)
    assert not expired.worker.killed and judges.idle_count() == 1
    judges._let_go(GPU0, time.monotonic(), busy=False)
    assert expired.worker.killed and judges.idle_count() == 0
    assert placement.workers.departed == [expired.worker]


def test_a_busy_device_keeps_an_expired_judge_only_so_long() -> None:
    judges = Judges(FakePlacement(), linger_s=LINGER_S)  # type: ignore[arg-type]
    stale = idle_judge(judges, "a", LINGER_S * BUSY_LINGER_FACTOR + 1)
    judges._let_go(GPU0, time.monotonic(), busy=True)
    assert stale.worker.killed


def test_a_job_giving_its_judge_back_lets_the_devices_expired_judges_go_with_it() -> None:
    placement = FakePlacement(on_device={GPU0: {1: []}})
    judges = Judges(placement, linger_s=LINGER_S)  # type: ignore[arg-type]
    expired = idle_judge(judges, "old reference", LINGER_S + 1)
    fresh = idle_judge(judges, "recent reference", 1.0)

    class Seat:
        def __init__(self) -> None:
            self.outputs: list[Any] = []

        def release(self, worker: Any, healthy: bool) -> None:
            pass

    mine = Judge(FakeProcess(), "this reference", Loaded(), GPU0)  # type: ignore[arg-type]
    mine.worker.label, mine.worker.output = "judge", type("O", (), {"take": lambda self: ""})()
    async def give_back() -> None:
        judges.give_back(mine, Seat(), healthy=True)  # type: ignore[arg-type]
        if judges._reaper is not None:
            judges._reaper.cancel()

    asyncio.run(give_back())
    assert expired.worker.killed
    assert not fresh.worker.killed and not mine.worker.killed
    assert judges.idle_count() == 2
