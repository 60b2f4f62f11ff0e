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
2. **Device activity** (independent): a few calls under the CUDA activity tracer (CUPTI
   through torch's profiler), which records every kernel, copy and set on every stream of the
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
    import torch.profiler

    sync = torch._C._cuda_synchronize
    now = time.perf_counter_ns
    event_class = torch.cuda.Event
    record = torch._C._CudaEventBase.record
    elapsed = torch._C._CudaEventBase.elapsed_time
    stream = torch.cuda.current_stream()
    sleep = getattr(torch._C, "_cuda_sleep", None)
    zero = torch.Tensor.zero_
    profile = torch.profiler.profile
    activities = [torch.profiler.ProfilerActivity.CUDA]
    device_type_cuda = torch.autograd.DeviceType.CUDA
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2_bytes = int(getattr(props, "L2_cache_size", 0)) or DEFAULT_L2_BYTES
    clock_khz = getattr(props, "clock_rate", 0) or 1_500_000
    lead_cycles = int(HOST_LEAD_S * clock_khz * 1e3)
    flush = torch.empty(2 * l2_bytes // 4, dtype=torch.int32, device="cuda")

    def device_busy_ms(fn: Callable[[], Any], calls: int) -> tuple[float | None, str | None]:
        try:
            with profile(activities=activities) as prof:
                for _ in range(calls):
                    fn()
                    sync()
            intervals = []
            for ev in prof.profiler.kineto_results.events():
                if ev.device_type() != device_type_cuda:
                    continue
                start_ns, length_ns = _event_span_ns(ev)
                intervals.append((start_ns, start_ns + length_ns))
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

    # Start the activity tracer once now, while no user code exists: its first start is slow.
    device_busy_ms(lambda: zero(flush), 1)
    return Timer(run, "cuda_event+l2_flush")


def _event_span_ns(ev: Any) -> tuple[int, int]:
    if hasattr(ev, "start_ns"):
        return int(ev.start_ns()), int(ev.duration_ns())
    return int(ev.start_us() * 1000), int(ev.duration_us() * 1000)


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
