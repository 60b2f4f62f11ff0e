"""The GPU's state around a timing, sampled by the server through NVML (a fake NVML here)."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pydantic
import pytest

from orchestration.executor import LocalExecutor
from orchestration.gpu_pool import Slot
from orchestration.job_step import Clock, JobStep, Side, Stage
from orchestration.placement import Observed
from profiling.gpu_state import GpuState, reason_names
from shared.models import GPUInfo
from shared.protocol import Message, Resources, SelfTimed, TimeSelf, TimingReport
from shared.settings import Settings

UUID = "GPU-7c1d2a3b-0000-4000-8000-000000000001"


class FakeNvml(SimpleNamespace):
    """Just enough of pynvml: one GPU whose SM clock walks down a list, power capped once."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    def __init__(self, sm: list[int], reasons: list[int], fail_after: int | None = None,
                 init_error: Exception | None = None) -> None:
        super().__init__()
        self.sm, self.reasons = itertools.cycle(sm), itertools.cycle(reasons)
        self.calls, self.fail_after, self.init_error = 0, fail_after, init_error
        self.asked_for: list[str] = []

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        self.asked_for.append(uuid)
        if uuid != UUID:
            raise RuntimeError("Not Found")
        return "handle"

    def nvmlDeviceGetClockInfo(self, handle: str, which: int) -> int:
        if which == self.NVML_CLOCK_SM:
            self.calls += 1
            if self.fail_after is not None and self.calls > self.fail_after:
                raise RuntimeError("GPU is lost")
            return next(self.sm)
        return 2619

    def nvmlDeviceGetTemperature(self, handle: str, which: int) -> int:
        return 40 + self.calls

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        return 650_000  # mW

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: str) -> int:
        return next(self.reasons)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: str) -> int:
        return 700_000


def sample(nvml: FakeNvml, rows: int) -> dict[str, Any] | None:
    sampler = GpuState(nvml).sampler(UUID, period_s=60)  # sampled by hand below
    assert sampler is not None
    for _ in range(rows):
        sampler.sample()
    return sampler.summary()


def test_summary_spans_the_samples_and_names_every_clock_limit_seen() -> None:
    state = sample(FakeNvml(sm=[1980, 1755, 1830], reasons=[0x1, 0x4, 0x0]), rows=3)
    assert state is not None
    assert state["samples"] == 3
    assert state["sm_clock_mhz"] == {"min": 1755, "median": 1830, "max": 1980}
    assert state["memory_clock_mhz"]["median"] == 2619
    assert state["temperature_c"] == {"min": 41, "median": 42, "max": 43}
    assert state["power_w"]["max"] == 650.0 and state["power_limit_w"] == 700.0
    assert state["clock_limits"] == ["sw_power_cap"]  # idle gaps between samples are no limit


def test_reason_bits_are_named() -> None:
    assert reason_names(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert reason_names(0) == []


def test_a_gpu_that_stops_answering_keeps_what_was_sampled_before() -> None:
    nvml = FakeNvml(sm=[1900], reasons=[0], fail_after=2)
    assert sample(nvml, rows=5)["samples"] == 2  # type: ignore[index]
    assert sample(FakeNvml(sm=[1900], reasons=[0], fail_after=0), rows=3) is None


def test_no_nvml_or_an_unknown_gpu_gives_no_state() -> None:
    assert GpuState(FakeNvml([1], [0], init_error=RuntimeError("no driver"))).sampler(UUID) is None
    assert GpuState(FakeNvml([1], [0])).sampler("GPU-unknown") is None
    assert GpuState(FakeNvml([1], [0])).sampler(None) is None
    nvml = FakeNvml([1], [0])
    assert GpuState(nvml).sampler(UUID.removeprefix("GPU-")) is not None  # torch's spelling
    assert nvml.asked_for == [UUID]


def test_the_sampling_thread_samples_before_and_after_the_call() -> None:
    sampler = GpuState(FakeNvml(sm=[1980], reasons=[0])).sampler(UUID, period_s=0.01)
    assert sampler is not None
    sampler.start()
    state = sampler.stop()
    assert state is not None and state["samples"] >= 2


def executor(tmp_path: Path, nvml: FakeNvml) -> LocalExecutor:
    settings = Settings(job_dir=tmp_path / "jobs", job_store_path=tmp_path / "jobs.sqlite3",
                        build_cache_dir=tmp_path / "cache", ref_cache_dir=tmp_path / "refs",
                        spares_per_gpu=0)
    ex = LocalExecutor(settings, "cuda", [Slot(0, 0)],
                       [GPUInfo(id=0, name="NVIDIA H100 80GB HBM3", memory_total_mb=81559, uuid=UUID)])
    ex.placement.gpu_state = GpuState(nvml)
    return ex


class TimedWorker:
    pid = None
    status = None

    async def call(self, message: Message, fds: list[int] | None = None) -> tuple[Message, list[int]]:
        return SelfTimed(timing=TimingReport(method="cuda_event+l2_flush", event_ms=[1.0]),
                         resources=Resources()), []


async def _progress(text: str, fraction: float) -> None:
    return None


@pytest.mark.parametrize("nvml_works", [True, False])
def test_a_timed_request_is_observed_by_the_server_beside_the_workers_reply(
        tmp_path: Path, nvml_works: bool) -> None:
    """The GPU's state comes from the server's own NVML around the call, beside the reply: a
    worker's reply has no field to claim one (its model forbids unknown keys)."""
    nvml = FakeNvml(sm=[1980], reasons=[0x4], init_error=None if nvml_works else OSError("no NVML"))
    ex = executor(tmp_path, nvml)
    step = JobStep()
    step.start(60)
    seat = ex.placement.seat(Slot(0, 0), step, Clock(), _progress, 0)

    async def scenario() -> tuple[Message, Observed]:
        return await seat.timed(TimedWorker(), Side.ALONE, Stage.TIMING,  # type: ignore[arg-type]
                                TimeSelf(), SelfTimed)

    reply, seen = asyncio.run(scenario())
    assert isinstance(reply, SelfTimed) and seen.wall_ms > 0
    if nvml_works:
        assert seen.gpu_state is not None
        assert seen.gpu_state["sm_clock_mhz"]["max"] == 1980
        assert seen.gpu_state["clock_limits"] == ["sw_power_cap"]
    else:
        assert seen.gpu_state is None
    with pytest.raises(pydantic.ValidationError):
        SelfTimed.model_validate({"kind": "self_timed", "gpu_state": {"sm_clock_mhz": 9999},
                                  "timing": {"method": "x", "event_ms": [1.0]},
                                  "resources": {}})
    ex.placement.workers.blocking.close()
