"""The timer's CUPTI tracer is one per process: CUPTI delivers records to the callbacks
registered last, so a second tracer (the worker's rehearsal binds two more timers) left the
worker's own tracer blind, and every call read as 0 ms of GPU work. A stand-in for
cupti-python plays CUPTI's part."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from harness import device_checks


class FakeCupti:
    """Records kernels while enabled; hands them to the last registered callbacks on flush."""

    class ActivityKind:
        CONCURRENT_KERNEL, MEMCPY, MEMSET = 1, 2, 3

    def __init__(self) -> None:
        self.completed: Callable[[list[Any]], None] | None = None
        self.registrations = 0
        self.enabled: set[int] = set()
        self.pending: list[Any] = []
        self.clock = 0

    def activity_register_callbacks(self, requested: Any, completed: Any) -> None:
        self.registrations += 1
        self.completed = completed

    def activity_enable(self, kind: int) -> None:
        self.enabled.add(kind)

    def activity_disable(self, kind: int) -> None:
        self.enabled.discard(kind)

    def activity_flush_all(self, flag: int) -> None:
        if self.completed is not None and self.pending:
            self.completed(self.pending)
        self.pending = []

    def kernel(self, ns: int) -> None:
        if self.ActivityKind.CONCURRENT_KERNEL in self.enabled:
            self.pending.append(types.SimpleNamespace(start=self.clock, end=self.clock + ns))
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
