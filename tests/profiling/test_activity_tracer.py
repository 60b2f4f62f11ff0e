"""The timer's CUPTI tracer is one per process: CUPTI delivers records to the callbacks
registered last, so a second tracer (the worker's rehearsal binds two more timers) left the
worker's own tracer blind, and every call read as 0 ms of GPU work. A stand-in for
cupti-python plays CUPTI's part."""

from __future__ import annotations

import enum
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from harness import device_checks


class FakeCupti:
    """Records kernels while enabled; hands them to the last registered callbacks on flush."""

    class ActivityKind(enum.Enum):  # (a plain enum: the tracer reads its members' values)
        CONCURRENT_KERNEL, MEMCPY, MEMSET = 10, 1, 2

    def __init__(self) -> None:
        self.completed: Callable[[list[Any]], None] | None = None
        self.registrations = 0
        self.enabled: set[FakeCupti.ActivityKind] = set()
        self.pending: list[Any] = []
        self.clock = 0

    def activity_register_callbacks(self, requested: Any, completed: Any) -> None:
        self.registrations += 1
        self.completed = completed

    def activity_enable(self, kind: ActivityKind) -> None:
        self.enabled.add(kind)

    def activity_disable(self, kind: ActivityKind) -> None:
        self.enabled.discard(kind)

    def activity_flush_all(self, flag: int) -> None:
        if self.completed is not None and self.pending:
            self.completed(self.pending)
        self.pending = []

    def kernel(self, ns: int) -> None:
        if self.ActivityKind.CONCURRENT_KERNEL in self.enabled:
            self.pending.append(types.SimpleNamespace(start=self.clock, end=self.clock + ns))
        self.clock += ns + 1000

    def launch(self, name: str, ns: int, grid: int = 4, stream: int = 7) -> None:
        """A kernel record as cupti-python gives it (ActivityKernel's fields)."""
        if self.ActivityKind.CONCURRENT_KERNEL in self.enabled:
            self.pending.append(types.SimpleNamespace(
                kind=self.ActivityKind.CONCURRENT_KERNEL.value, start=self.clock,
                end=self.clock + ns, name=name, grid_x=grid, grid_y=1, grid_z=1, block_x=256,
                block_y=1, block_z=1, stream_id=stream))
        self.clock += ns + 1000

    def copy(self, ns: int, nbytes: int, copy_kind: int = 8) -> None:
        if self.ActivityKind.MEMCPY in self.enabled:
            self.pending.append(types.SimpleNamespace(
                kind=self.ActivityKind.MEMCPY.value, start=self.clock, end=self.clock + ns,
                copy_kind=copy_kind, bytes=nbytes, stream_id=7))
        self.clock += ns + 1000


@pytest.fixture
def cupti(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCupti]:
    fake = FakeCupti()
    package = types.ModuleType("cupti")
    package.cupti = fake  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupti", package)
    monkeypatch.setattr(device_checks, "_TRACER", None)
    # the tracer's warm-up trace zeroes a small CUDA tensor: a CPU one here
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: real_empty(*a, **{**k, "device": "cpu"}))
    monkeypatch.setattr(torch._C, "_cuda_synchronize", lambda: None, raising=False)
    yield fake


def test_every_tracer_of_a_process_is_the_one_started_first_and_sees_the_kernels(
        cupti: FakeCupti) -> None:
    sync = lambda: None
    workers_own = device_checks.ActivityTracer.start()
    rehearsal_ref, rehearsal_custom = device_checks.ActivityTracer.start(), device_checks.ActivityTracer.start()
    assert workers_own.error is None
    assert rehearsal_ref is workers_own and rehearsal_custom is workers_own
    assert cupti.registrations == 1
    intervals = workers_own.trace(lambda: cupti.kernel(20_000), 3, sync)
    assert len(intervals) == 3 and all(end - start == 20_000 for start, end in intervals)


def test_without_cupti_python_the_tracer_says_why_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupti", None)  # import fails
    monkeypatch.setattr(device_checks, "_TRACER", None)
    first = device_checks.ActivityTracer.start()
    assert first.error is not None and "cupti-python" in first.error
    assert device_checks.ActivityTracer.start() is first


def test_a_traced_call_keeps_each_kernels_name_grid_block_and_stream(cupti: FakeCupti) -> None:
    tracer = device_checks.ActivityTracer.start()

    def call() -> None:
        cupti.copy(1_000, 4096)
        for _ in range(3):
            cupti.launch("_Z3addPKfS0_Pfi", 20_000)
        cupti.launch("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", 50_000, grid=132, stream=9)

    activities, wall_ms, failed = tracer.collect(call, 1, lambda: None)
    assert failed is None and wall_ms >= 0
    launches, left_out, left_out_ms = device_checks.launch_records(activities, tracer.demangle)
    assert [(x.kind, x.name, x.count) for x in launches] == [
        ("memcpy", "DtoD", 1), ("kernel", "_Z3addPKfS0_Pfi", 3),
        ("kernel", "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", 1)]
    copy, add, gemm = launches
    assert copy.bytes == 4096 and copy.stream == 7 and copy.grid is None
    assert add.grid == [4, 1, 1] and add.block == [256, 1, 1] and add.stream == 7
    assert add.device_ms == pytest.approx(0.06) and gemm.device_ms == pytest.approx(0.05)
    assert gemm.grid == [132, 1, 1] and gemm.stream == 9
    # the C++ runtime's demangler where the host has one (a name CUPTI gives mangled)
    assert add.demangled in (None, "add(float const*, float const*, float*, int)")
    assert left_out == 0 and left_out_ms == 0


def test_a_call_that_raises_keeps_what_it_launched_before(cupti: FakeCupti) -> None:
    tracer = device_checks.ActivityTracer.start()

    def call() -> None:
        cupti.launch("first_kernel", 1_000)
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    activities, _, failed = tracer.collect(call, 1, lambda: None)
    assert isinstance(failed, RuntimeError)
    assert [a.name for a in activities] == ["first_kernel"]
    assert cupti.enabled == set()  # collection switched off again


def test_launches_beyond_the_listed_ones_are_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_checks, "LAUNCHES_LISTED", 2)
    activities = [device_checks.Activity("kernel", i * 10, i * 10 + 5, f"k{i}", (1, 1, 1),
                                         (32, 1, 1), 7) for i in range(5)]
    launches, left_out, left_out_ms = device_checks.launch_records(activities, lambda n: None)
    assert [x.name for x in launches] == ["k0", "k1"]
    assert left_out == 3 and left_out_ms == pytest.approx(15e-6)


def test_a_long_kernel_name_is_clipped() -> None:
    name = "void cutlass::Kernel2<" + "x" * 5000 + ">(Params)"
    activities = [device_checks.Activity("kernel", 0, 1, name, (1, 1, 1), (1, 1, 1), 7)]
    launch = device_checks.launch_records(activities, lambda n: None)[0][0]
    assert len(launch.name) == device_checks.NAME_CHARS and launch.name.endswith("…")
