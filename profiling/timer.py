"""Time a kernel call in the worker, with primitives bound before any user code is imported.

:func:`bind` runs while the worker is still clean (before the job's sources are imported) and
returns a :class:`Timer` whose every CUDA and clock function was looked up then and is held
in a closure: patching ``torch.cuda.Event.elapsed_time``, ``torch.cuda.synchronize``,
``time.perf_counter`` or this module from user code changes nothing here. The timer returns
raw samples only; the statistics and the verdict on them are made by the server
(:mod:`profiling.integrity`), which the kernel cannot reach.

On a GPU one timing run has three parts:

1. **Event samples** (the figure reported): before each sample the inputs are refilled with
   fresh values (so a cache keyed by content or pointer never hits), the L2 is flushed (a
   write over twice its size), and the device synchronised; then a short GPU sleep keeps the
   device busy while the host enqueues the start event and the call, so the interval holds
   the GPU's work and not the host's launch latency; after the end event the *whole device*
   is synchronised, so work left on other streams cannot leak into the next sample.
2. **Device activity** (independent): a few calls under CUPTI's activity API (NVIDIA's
   ``cupti-python``), which records every kernel, copy and set on every stream of the
   process, whoever launched it (C++ streams, cuBLAS handles, other threads). Busy time per
   call is the union of those intervals over the calls.
3. **Host-synchronised samples** (independent): device sync, host clock, call, device sync,
   host clock; these include launch overhead and so are never below the GPU's work.

On the CPU each sample is a ``perf_counter_ns`` interval.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

WARMUP_S = 0.05
WARMUP_MIN_CALLS = 3
WARMUP_MAX_CALLS = 10_000
DEFAULT_L2_BYTES = 64 * 2**20
HOST_LEAD_S = 500e-6  # GPU sleep that covers the host's enqueueing of event + call
ACTIVITY_CALLS = 10
HOST_SYNC_SAMPLES = 10

Refill = Callable[[int], None]


class Timer:
    """What :func:`bind` returns: ``run(fn, samples, refill)`` → raw samples (a JSON dict)."""

    def __init__(self, run: Callable[[Callable[[], Any], int, Refill | None], dict[str, Any]],
                 method: str) -> None:
        self.run = run
        self.method = method


def bind(device: str) -> Timer:
    """A timer for ``device`` whose primitives are fixed now, before user code exists."""
    if device == "cuda":
        return _bind_cuda()
    return _bind_cpu()


def _bind_cpu() -> Timer:
    now = time.perf_counter_ns

    def run(fn: Callable[[], Any], samples: int, refill: Refill | None) -> dict[str, Any]:
        warm_calls, warm_ns = _warm_up(fn, lambda: None, now)
        out = []
        for i in range(samples):
            if refill is not None:
                refill(i)
            t0 = now()
            fn()
            out.append((now() - t0) / 1e6)
        return {"method": "cpu_perf_counter", "event_ms": out, "warmup_calls": warm_calls,
                "warmup_ms": warm_ns / 1e6}

    return Timer(run, "cpu_perf_counter")


def _warm_up(fn: Callable[[], Any], sync: Callable[[], None], now: Callable[[], int]) -> tuple[int, int]:
    start = now()
    calls = 0
    while calls < WARMUP_MIN_CALLS or (
        now() - start < WARMUP_S * 1e9 and calls < WARMUP_MAX_CALLS
    ):
        fn()
        sync()
        calls += 1
    return calls, now() - start


def _bind_cuda() -> Timer:
    import torch

    sync = torch._C._cuda_synchronize
    now = time.perf_counter_ns
    event_class = torch.cuda.Event
    record = torch._C._CudaEventBase.record
    elapsed = torch._C._CudaEventBase.elapsed_time
    stream = torch.cuda.current_stream()
    sleep = getattr(torch._C, "_cuda_sleep", None)
    zero = torch.Tensor.zero_
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2_bytes = int(getattr(props, "L2_cache_size", 0)) or DEFAULT_L2_BYTES
    clock_khz = getattr(props, "clock_rate", 0) or 1_500_000
    lead_cycles = int(HOST_LEAD_S * clock_khz * 1e3)
    flush = torch.empty(2 * l2_bytes // 4, dtype=torch.int32, device="cuda")
    tracer = _ActivityTracer.start()

    def device_busy_ms(fn: Callable[[], Any], calls: int) -> tuple[float | None, str | None]:
        if tracer.error is not None:
            return None, tracer.error
        try:
            intervals = tracer.trace(fn, calls, sync)
        except Exception as exc:  # noqa: BLE001 - a missing trace is itself a finding
            return None, f"the device activity trace failed: {type(exc).__name__}: {exc}"
        if not intervals:
            return 0.0, None
        return _union_ns(intervals) / 1e6 / calls, None

    def run(fn: Callable[[], Any], samples: int, refill: Refill | None) -> dict[str, Any]:
        warm_calls, warm_ns = _warm_up(fn, sync, now)
        starts = [event_class(enable_timing=True) for _ in range(samples)]
        ends = [event_class(enable_timing=True) for _ in range(samples)]
        for i in range(samples):
            if refill is not None:
                refill(i)
            zero(flush)
            sync()
            if sleep is not None:
                sleep(lead_cycles)
            record(starts[i], stream)
            fn()
            record(ends[i], stream)
            sync()
        event_ms = [float(elapsed(s, e)) for s, e in zip(starts, ends)]
        host_ms = []
        for i in range(min(samples, HOST_SYNC_SAMPLES)):
            zero(flush)
            sync()
            t0 = now()
            fn()
            sync()
            host_ms.append((now() - t0) / 1e6)
        busy_ms, busy_error = device_busy_ms(fn, min(samples, ACTIVITY_CALLS))
        return {
            "method": "cuda_event+l2_flush", "event_ms": event_ms, "host_sync_ms": host_ms,
            "device_busy_ms": busy_ms, "device_busy_error": busy_error,
            "device_busy_calls": min(samples, ACTIVITY_CALLS),
            "warmup_calls": warm_calls, "warmup_ms": warm_ns / 1e6,
        }

    return Timer(run, "cuda_event+l2_flush")


class _ActivityTracer:
    """CUPTI activity records (kernels, copies, sets on every stream), through ``cupti-python``.

    Started once, while the worker is still clean: CUPTI's set-up is paid then, and the
    functions are held here. Collection is switched on only around the calls it measures, so
    it adds nothing to the event samples.
    """

    def __init__(self) -> None:
        self.error: str | None = None
        self.records: list[tuple[int, int]] = []

    @classmethod
    def start(cls) -> _ActivityTracer:
        tracer = cls()
        try:
            from cupti import cupti
        except ImportError:
            tracer.error = ("cupti-python is not installed (pip install cupti-python): "
                            "no device activity measure")
            return tracer
        try:
            kinds = [cupti.ActivityKind.CONCURRENT_KERNEL, cupti.ActivityKind.MEMCPY,
                     cupti.ActivityKind.MEMSET]
            records = tracer.records

            def requested() -> tuple[int, int]:
                return 8 * 2**20, 0

            def completed(activities: list[Any]) -> None:
                for a in activities:
                    start, end = getattr(a, "start", None), getattr(a, "end", None)
                    if start is not None and end is not None and end >= start:
                        records.append((int(start), int(end)))

            enable, disable, flush = (cupti.activity_enable, cupti.activity_disable,
                                      cupti.activity_flush_all)
            cupti.activity_register_callbacks(requested, completed)

            def trace(fn: Callable[[], Any], calls: int, sync: Callable[[], None]) -> list[tuple[int, int]]:
                sync()
                flush(1)
                records.clear()
                for kind in kinds:
                    enable(kind)
                try:
                    for _ in range(calls):
                        fn()
                        sync()
                finally:
                    for kind in kinds:
                        disable(kind)
                    flush(1)
                return list(records)

            tracer.trace = trace  # type: ignore[method-assign]
            import torch

            warm = torch.empty(1024, device="cuda")
            trace(lambda: warm.zero_(), 1, torch._C._cuda_synchronize)
        except Exception as exc:  # noqa: BLE001
            tracer.error = f"CUPTI activity tracing is unavailable: {type(exc).__name__}: {exc}"
        return tracer

    def trace(self, fn: Callable[[], Any], calls: int, sync: Callable[[], None]) -> list[tuple[int, int]]:
        raise RuntimeError(self.error or "the tracer was not started")


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total
