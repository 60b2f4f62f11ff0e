"""The math modes torch runs a call under (harness.math_modes), and the one more call a timer
observes after its timing (Timer.observe): the modes before and after it, the setters it
invoked (TF32 switched on inside a forward and back off), and, on a GPU, its launches."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import suppress
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from harness.device_checks import Activity, launch_records, union_ns
from harness.math_modes import ModeReader
from harness.timer import NO_GPU, CudaTimer, Timer
from shared.observations import TRACE_MODES_SET
from tests.conftest import ROOT


@pytest.fixture
def modes() -> Iterator[ModeReader]:
    """A reader; torch's legacy flags put back as they were after the test."""
    c = torch._C
    saved = (c._get_cublas_allow_tf32(), c._get_cudnn_allow_tf32(),
             c._get_float32_matmul_precision(),
             c._get_cublas_allow_fp16_reduced_precision_reduction())
    yield ModeReader()
    c._set_cublas_allow_tf32(saved[0])
    c._set_cudnn_allow_tf32(saved[1])
    c._set_float32_matmul_precision(saved[2])
    reduced = saved[3]
    c._set_cublas_allow_fp16_reduced_precision_reduction(
        *(reduced if isinstance(reduced, tuple) else (reduced,)))


def tf32_inside(work: Callable[[], Any] = lambda: None) -> Callable[[], Any]:
    """A forward that switches TF32 on for its matmuls and back off before it returns."""

    def forward() -> Any:
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            return work()
        finally:
            torch.backends.cuda.matmul.allow_tf32 = False

    return forward


def test_the_modes_are_read_as_torch_has_them(modes: ModeReader) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True
    read = modes.read()
    assert read.matmul_tf32 is False and read.cudnn_tf32 is True
    assert read.float32_matmul_precision == "highest"
    torch.set_float32_matmul_precision("high")
    read = modes.read()
    assert read.matmul_tf32 is True and read.float32_matmul_precision == "high"
    assert read.unreadable == {}


def test_the_setters_a_block_invokes_are_recorded_and_put_back(modes: ModeReader) -> None:
    setter = torch._C._set_cublas_allow_tf32
    with modes.watching() as seen:
        tf32_inside()()
        torch.backends.cudnn.allow_tf32 = False  # (cuDNN's property holds its own setter)
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
            pass
        torch.set_float32_matmul_precision("medium")
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    # (each setting once, in the order first made)
    assert seen == ["matmul_tf32=True", "matmul_tf32=False", "cudnn_tf32=False",
                    "cudnn_tf32=True", "float32_matmul_precision=medium",
                    "fp16_reduced_precision_reduction=False"]
    assert torch._C._set_cublas_allow_tf32 is setter
    # and the modes themselves are what the block left
    assert modes.read().float32_matmul_precision == "medium"


@pytest.mark.filterwarnings("ignore:made-up")  # (torch ignores a precision it does not know)
def test_a_call_that_switches_modes_in_a_loop_leaves_a_bounded_record(modes: ModeReader) -> None:
    with modes.watching() as seen:
        for _ in range(10_000):
            tf32_inside()()
        for i in range(100):
            with suppress(RuntimeError):
                torch.set_float32_matmul_precision(f"made-up-{i}")
    assert seen[:2] == ["matmul_tf32=True", "matmul_tf32=False"]
    assert len(seen) == TRACE_MODES_SET


def test_the_setters_are_put_back_when_the_block_raises(modes: ModeReader) -> None:
    setter = torch._C._set_cudnn_allow_tf32
    prop = vars(type(torch.backends.cudnn))["allow_tf32"].setter
    with pytest.raises(ValueError), modes.watching():
        raise ValueError("the kernel failed")
    assert torch._C._set_cudnn_allow_tf32 is setter
    assert vars(type(torch.backends.cudnn))["allow_tf32"].setter is prop


def test_a_setter_that_cannot_be_watched_leaves_the_others_watched(modes: ModeReader) -> None:
    class Frozen:
        """A property whose setter is read-only (a process that patched torch so)."""

        @property
        def setter(self) -> Callable[[Any], None]:
            return lambda value: None

    modes._props = [(Frozen(), "cudnn_tf32", lambda value: [("", bool(value))])]
    with modes.watching() as seen:
        tf32_inside()()
    assert seen == ["matmul_tf32=True", "matmul_tf32=False"]


PROBE = """
import json, torch
from harness.math_modes import ModeReader
reader = ModeReader()
with reader.watching() as seen:
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    torch.backends.cudnn.conv.fp32_precision = "ieee"
read = reader.read()
print(json.dumps({"seen": seen, "matmul_tf32": read.matmul_tf32,
                  "cudnn_tf32": read.cudnn_tf32, "unreadable": read.unreadable}))
"""


def test_torchs_newer_precision_api_is_read_and_watched_too() -> None:
    # (in a process of its own: once both APIs are used, torch refuses the older getters)
    if not hasattr(torch._C, "_get_fp32_precision_getter"):
        pytest.skip("this torch has no fp32_precision API")
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, check=True,
                          env={"PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path]),
                               "PATH": "/usr/bin:/bin"})
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert "matmul_tf32=True" in found["seen"] and "cudnn_tf32=False" in found["seen"]
    assert found["matmul_tf32"] is True and found["cudnn_tf32"] is False


def test_on_the_cpu_a_call_is_observed_for_its_modes_only(modes: ModeReader) -> None:
    timer = Timer()
    traced = timer.observe(tf32_inside(lambda: torch.ones(4) @ torch.ones(4)), ["float32"])
    assert traced.device == "cpu" and traced.unobservable == NO_GPU
    assert traced.launches == [] and traced.call_error is None
    assert traced.modes_set == ["matmul_tf32=True", "matmul_tf32=False"]
    assert traced.modes_before.matmul_tf32 is False and traced.modes_after.matmul_tf32 is False
    assert traced.input_dtypes == ["float32"] and traced.observed_by == "kernel_process"
    assert traced.wall_ms is not None and traced.cost_ms >= traced.wall_ms


def test_a_call_that_raises_is_said_not_raised(modes: ModeReader) -> None:
    def fails() -> None:
        raise RuntimeError("CUDA error: device-side assert triggered")

    traced = Timer().observe(fails, [])
    assert traced.call_error is not None and "device-side assert" in traced.call_error


class FakeTracer:
    """The tracer's part for a GPU timer on the CPU: a call of two launches on stream 7."""

    error: str | None = None

    def __init__(self, raises: BaseException | None = None) -> None:
        self.raises = raises

    @staticmethod
    def demangle(name: str) -> str | None:
        return "add(float*)" if name == "_Z3addPf" else None

    def collect(self, fn: Callable[[], Any], calls: int, sync: Callable[[], None]
                ) -> tuple[list[Activity], float, BaseException | None]:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001
            return [], 0.1, exc
        return [Activity("kernel", 0, 2_000, "_Z3addPf", (8, 1, 1), (256, 1, 1), 7),
                Activity("memcpy", 1_000, 4_000, "DtoD", stream=7, bytes=64)], 0.05, None


def gpu_timer(tracer: Any) -> CudaTimer:
    """A CUDA timer's observing parts, with ``tracer`` in CUPTI's place (no GPU here)."""
    timer = object.__new__(CudaTimer)
    timer._now, timer._modes, timer._tracer = Timer()._now, ModeReader(), tracer
    timer._sync = lambda: None  # type: ignore[method-assign]
    timer._launch_records, timer._union_ns = launch_records, union_ns
    return timer


def test_on_a_gpu_the_launches_are_listed_with_the_modes(modes: ModeReader) -> None:
    traced = gpu_timer(FakeTracer()).observe(tf32_inside(), ["float32", "float32"])
    assert traced.device == "cuda" and traced.unobservable is None
    assert [(x.kind, x.name, x.demangled) for x in traced.launches] == [
        ("kernel", "_Z3addPf", "add(float*)"), ("memcpy", "DtoD", None)]
    assert traced.device_busy_ms == pytest.approx(0.004)  # (overlapping: counted once)
    assert traced.wall_ms == pytest.approx(0.05)
    assert traced.modes_set == ["matmul_tf32=True", "matmul_tf32=False"]


def test_without_cupti_a_gpu_trace_says_why_and_still_reads_the_modes(
        modes: ModeReader) -> None:
    blind = SimpleNamespace(error="cupti-python is not installed (pip install cupti-python)")
    traced = gpu_timer(blind).observe(tf32_inside(), [])
    assert traced.unobservable is not None and "cupti-python" in traced.unobservable
    assert traced.launches == [] and traced.modes_set == ["matmul_tf32=True",
                                                          "matmul_tf32=False"]


def test_a_gpu_call_that_raises_keeps_its_error_beside_the_trace(modes: ModeReader) -> None:
    def fails() -> None:
        raise RuntimeError("an illegal memory access")

    traced = gpu_timer(FakeTracer()).observe(fails, [])
    assert traced.unobservable is None and traced.launches == []
    assert traced.call_error is not None and "illegal memory access" in traced.call_error
