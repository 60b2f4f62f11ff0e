"""The Ray executor's dispatch, retry and cluster view, against fake slots (no Ray needed).

A :class:`FakeSlot` stands for one NodeRunner actor: it holds each job until the test lets it
go, and can be made to lose the job (as Ray's actor errors do, translated to SlotLost), to
stop answering, or to report progress. The real actors run in tests/ray/.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from orchestration import ray_executor
from orchestration.device_probe import DeviceInfo
from orchestration.job_manager import JobManager
from orchestration.job_store import JobStore
from orchestration.ray_executor import RayExecutor, SlotLost
from orchestration.ray_node import NodeReply, SlotInfo
from shared.models import (
    JobState,
    KernelCode,
    KernelExecResult,
    KernelType,
    Outcome,
    WorkerJob,
    WorkerResult,
)
from shared.settings import Settings

pytestmark = pytest.mark.anyio

KERNEL = KernelCode(source_code="class Model: pass", kernel_type=KernelType.TORCH)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FakeSlot:
    """One slot's actor: runs what it is sent when the test says so."""

    def __init__(self, node: str, pid: int = 100) -> None:
        self.info = SlotInfo(node_id=node, address=f"10.0.0.{node[-1]}", pid=pid,
                             isolation="namespaces+uid", ready_workers=3)
        self.received: list[str] = []
        self.finish: dict[str, asyncio.Future[str]] = {}  # job id -> "ok" | "lose" | "hang"
        self.cancelled: list[str] = []
        self.progress_of: dict[str, tuple[str, float]] = {}
        self.logs: dict[str, str] = {}
        self.down = False
        self.readies = 0

    async def ready(self) -> SlotInfo:
        self.readies += 1
        if self.down:
            raise SlotLost("the actor is restarting")
        return self.info

    async def run(self, job: WorkerJob, timeout: float) -> NodeReply:
        self.received.append(job.job_id)
        outcome = self.finish.setdefault(job.job_id, asyncio.get_running_loop().create_future())
        try:
            what = await outcome
        except asyncio.CancelledError:
            self.cancelled.append(job.job_id)
            raise
        if what == "lose":
            self.down = True
            raise SlotLost("ActorDiedError: the actor died unexpectedly")
        result = WorkerResult(kernel_exec_result=KernelExecResult(
            outcome=Outcome.SUCCESS, compiled=True, metadata={"device": "cpu"}),
            stage_timings={"queue_wait": 1.0, "total": 5.0})
        return NodeReply(result=result, info=self.info)

    async def progress(self, job_id: str) -> tuple[str, float] | None:
        if self.down:
            raise SlotLost("gone")
        return self.progress_of.get(job_id)

    async def take_log(self, job_id: str) -> str | None:
        return self.logs.get(job_id)

    async def close(self) -> None:
        pass

    def settle(self, job_id: str, what: str = "ok") -> None:
        self.finish.setdefault(job_id, asyncio.get_running_loop().create_future()).set_result(what)


NODES = [
    {"NodeID": "node-1", "NodeManagerAddress": "10.0.0.1", "Alive": True,
     "Resources": {"kes_slot": 2.0, "CPU": 4.0}},
    {"NodeID": "node-2", "NodeManagerAddress": "10.0.0.2", "Alive": True,
     "Resources": {"kes_slot": 2.0, "CPU": 4.0}},
    {"NodeID": "node-3", "NodeManagerAddress": "10.0.0.3", "Alive": False, "Resources": {}},
]


def settings(tmp_path: Path, **changes: object) -> Settings:
    return Settings(device="cpu", job_dir=tmp_path / "jobs", job_store_path=tmp_path / "j.db",
                    executor="ray", ray_address="10.0.0.1:6379", **changes)  # type: ignore[arg-type]


async def executor_of(tmp_path: Path, *slots: FakeSlot, **changes: object) -> RayExecutor:
    executor = RayExecutor(settings(tmp_path, **changes), "cpu", "kes_slot", "10.0.0.1:6379",
                           list(slots), nodes=lambda: NODES)
    await executor.open()
    await executor.start()
    return executor


def job(tmp_path: Path, name: str) -> WorkerJob:
    work = tmp_path / "jobs" / name
    work.mkdir(parents=True, exist_ok=True)
    return WorkerJob(job_id=name, kind="evaluate", kernel=KERNEL, device="cpu",
                     work_dir=str(work), cache_dir=str(tmp_path / "builds"))


class Progress:
    def __init__(self) -> None:
        self.seen: list[tuple[str, float]] = []

    async def __call__(self, message: str, fraction: float) -> None:
        self.seen.append((message, fraction))


async def until(condition: Callable[[], bool], deadline_s: float = 5.0) -> None:
    end = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < end, "condition not met in time"
        await asyncio.sleep(0.005)


def submit(executor: RayExecutor, work: WorkerJob, timeout: float = 30.0
           ) -> asyncio.Task[WorkerResult]:
    return asyncio.ensure_future(executor.run(work, timeout, Progress()))


async def settled(task: Awaitable[WorkerResult]) -> WorkerResult:
    return await asyncio.wait_for(task, 5)


async def test_jobs_go_to_idle_slots_in_arrival_order_one_job_per_slot(tmp_path: Path) -> None:
    a, b = FakeSlot("node-1"), FakeSlot("node-2")
    executor = await executor_of(tmp_path, a, b)
    first, second, third = (submit(executor, job(tmp_path, n)) for n in ("j1", "j2", "j3"))
    await until(lambda: len(a.received) + len(b.received) == 2)

    assert sorted(a.received + b.received) == ["j1", "j2"]
    assert executor.status().queue_length == 1  # j3 waits: no slot runs two jobs
    holder = a if "j1" in a.received else b
    holder.settle("j1")
    assert (await settled(first)).kernel_exec_result.outcome is Outcome.SUCCESS  # type: ignore[union-attr]
    await until(lambda: "j3" in holder.received)
    assert executor.status().queue_length == 0
    (b if holder is a else a).settle("j2")
    holder.settle("j3")
    await settled(second), await settled(third)
    await executor.close()


async def test_a_job_whose_slot_is_lost_runs_again_first_in_line_and_the_slot_comes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ray_executor, "REJOIN_RETRY_S", 0.01)
    a, b = FakeSlot("node-1"), FakeSlot("node-2")
    executor = await executor_of(tmp_path, a, b)
    lost_job = submit(executor, job(tmp_path, "j1"))
    await until(lambda: a.received == ["j1"])
    other = submit(executor, job(tmp_path, "j2"))
    await until(lambda: b.received == ["j2"])
    waiting = submit(executor, job(tmp_path, "j3"))  # queued before j1 is lost
    await until(lambda: executor.status().queue_length == 1)

    a.settle("j1", "lose")
    await until(lambda: executor.cluster().lost == 1)
    b.settle("j2")
    await until(lambda: len(b.received) == 2)
    assert b.received[1] == "j1"  # the lost job went first, before j3
    b.settle("j1")
    result = await settled(lost_job)

    assert result.state is JobState.COMPLETED
    verdict = result.kernel_exec_result
    assert verdict is not None and verdict.metadata["ray"] == {
        "node_id": "node-2", "address": "10.0.0.2", "attempts": 2}
    await until(lambda: b.received[-1] == "j3")
    a.down = False  # Ray restarted the actor: the slot takes jobs again
    await until(lambda: executor.cluster().lost == 0)
    later = submit(executor, job(tmp_path, "j4"))
    await until(lambda: a.received == ["j1", "j4"])
    for slot, name in ((b, "j3"), (a, "j4")):
        slot.settle(name)
    await settled(other), await settled(waiting), await settled(later)
    await executor.close()


async def test_a_job_lost_twice_fails_and_says_where(tmp_path: Path) -> None:
    a, b = FakeSlot("node-1"), FakeSlot("node-2")
    executor = await executor_of(tmp_path, a, b)
    task = submit(executor, job(tmp_path, "j1"))
    await until(lambda: a.received == ["j1"])
    a.settle("j1", "lose")
    await until(lambda: b.received == ["j1"])
    b.settle("j1", "lose")
    result = await settled(task)

    assert result.state is JobState.FAILED
    assert result.error is not None
    assert "lost twice" in result.error
    assert "10.0.0.1" in result.error and "10.0.0.2" in result.error
    assert "ActorDiedError" in result.error
    assert executor.cluster().lost == 2
    await executor.close()


async def test_a_slot_that_stops_answering_is_lost_and_its_call_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ray_executor, "PROGRESS_POLL_S", 0.01)
    a, b = FakeSlot("node-1"), FakeSlot("node-2")
    executor = await executor_of(tmp_path, a, b, worker_grace_s=0.0)
    # Neither slot ever answers: the deadline (4 x timeout + grace) ends each attempt.
    result = await settled(submit(executor, job(tmp_path, "j1"), timeout=0.05))

    assert result.state is JobState.FAILED
    assert result.error is not None and "no answer within" in result.error
    assert a.cancelled == ["j1"] and b.cancelled == ["j1"]
    await executor.close()


async def test_the_nodes_progress_is_relayed_after_where_the_job_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ray_executor, "PROGRESS_POLL_S", 0.01)
    a = FakeSlot("node-1")
    executor = await executor_of(tmp_path, a)
    progress = Progress()
    task = asyncio.ensure_future(executor.run(job(tmp_path, "j1"), 30, progress))
    await until(lambda: a.received == ["j1"])
    a.progress_of["j1"] = ("queued", 0.05)  # the node's own queue: not news to the client
    await asyncio.sleep(0.05)
    a.progress_of["j1"] = ("timing the kernel", 0.6)
    await until(lambda: ("timing the kernel", 0.6) in progress.seen)
    a.settle("j1")
    await settled(task)

    messages = [m for m, _ in progress.seen]
    assert messages == ["queued", "running on node 10.0.0.1 (node-1), slot 0",
                        "timing the kernel"]
    await executor.close()


async def test_the_worker_log_comes_back_into_the_jobs_directory(tmp_path: Path) -> None:
    a = FakeSlot("node-1")
    a.logs["j1"] = "hello from the kernel\n"
    executor = await executor_of(tmp_path, a)
    work = job(tmp_path, "j1")
    task = submit(executor, work)
    await until(lambda: a.received == ["j1"])
    a.settle("j1")
    await settled(task)

    log = Path(work.work_dir) / "worker.log"
    await until(log.exists)
    assert log.read_text() == "hello from the kernel\n"
    await executor.close()


async def test_the_cluster_view_shows_nodes_their_slots_and_which_are_busy(
    tmp_path: Path,
) -> None:
    a, b = FakeSlot("node-1", pid=11), FakeSlot("node-2", pid=22)
    executor = await executor_of(tmp_path, a, b)
    task = submit(executor, job(tmp_path, "j1"))
    await until(lambda: a.received == ["j1"])
    cluster = executor.cluster()

    assert [(n.node_id, n.alive, n.gpus, n.slots, n.busy) for n in cluster.nodes] == [
        ("node-1", True, 2, 1, 1), ("node-2", True, 2, 1, 0), ("node-3", False, 0, 0, 0)]
    assert [(s.state, s.node_id, s.pid, s.job_id) for s in cluster.slots] == [
        ("busy", "node-1", 11, "j1"), ("idle", "node-2", 22, None)]
    assert (cluster.busy, cluster.lost, cluster.resource) == (1, 0, "kes_slot")
    a.settle("j1")
    await settled(task)
    assert executor.cluster().busy == 0
    await executor.close()


async def test_cache_counts_add_what_each_actor_did_since_its_last_report(
    tmp_path: Path,
) -> None:
    a = FakeSlot("node-1", pid=11)
    a.info.cache = {"reference": {"hits": 2, "lookups": 3}}
    executor = await executor_of(tmp_path, a)
    assert executor.status().cache["reference"] == {"hits": 2, "lookups": 3}

    a.info = a.info.model_copy(update={"cache": {"reference": {"hits": 5, "lookups": 7}}})
    task = submit(executor, job(tmp_path, "j1"))
    await until(lambda: a.received == ["j1"])
    a.settle("j1")
    await settled(task)
    assert executor.status().cache["reference"] == {"hits": 5, "lookups": 7}

    # A restarted actor (another pid) counts from zero again: its counts are all new.
    a.info = a.info.model_copy(update={"pid": 12, "cache": {"reference": {"hits": 1, "lookups": 1},
                                                            "jit": {"restored": 2, "kept": 1}}})
    task = submit(executor, job(tmp_path, "j2"))
    await until(lambda: "j2" in a.received)
    a.settle("j2")
    await settled(task)
    assert executor.status().cache["reference"] == {"hits": 6, "lookups": 8}
    # every cache's own counts are added, whatever they are called (the JIT store's too)
    assert executor.status().cache["jit"] == {"restored": 2, "kept": 1}
    await executor.close()


async def test_health_and_stats_carry_the_cluster_and_a_lost_slot_degrades_health(
    tmp_path: Path,
) -> None:
    a, b = FakeSlot("node-1"), FakeSlot("node-2")
    executor = await executor_of(tmp_path, a, b)
    store = JobStore(tmp_path / "j.db")
    manager = JobManager(settings(tmp_path), DeviceInfo(device="cpu"), store, executor=executor)

    health, stats = manager.health(), manager.stats()
    assert health.status == "healthy" and health.cluster is not None
    assert len(health.cluster.slots) == 2 and health.isolation == "namespaces+uid"
    assert stats.cluster is not None and stats.worker_slots == 2 and stats.ready_workers == 6

    task = submit(executor, job(tmp_path, "j1"))
    await until(lambda: a.received == ["j1"])
    a.settle("j1", "lose")
    await until(lambda: b.received == ["j1"])
    assert manager.health().status == "degraded"
    b.settle("j1")
    await settled(task)
    store.close()
    await executor.close()


async def test_no_slot_starting_is_an_error_naming_the_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ray_executor, "START_TIMEOUT_S", 0.05)
    a = FakeSlot("node-1")
    a.down = True
    executor = RayExecutor(settings(tmp_path), "cpu", "kes_slot", "10.0.0.1:6379", [a])
    with pytest.raises(ray_executor.ClusterError, match="10.0.0.1:6379"):
        await executor.open()
