"""Time a kernel call: warm-up by time, then one sample per call.

On a GPU each sample is bracketed by CUDA events after an L2 flush (a write over a buffer
twice the L2 size), so a kernel is never timed against a cache warmed by its previous call;
the device is synchronised after every sample so samples cannot overlap. Between the flush and
the start event a short GPU-side sleep keeps the device busy while the host enqueues the start
event and the call: without it the interval would include the host's launch latency (an idle
GPU waiting for work), which inflates short kernels several-fold. On the CPU each
sample is a ``perf_counter`` interval. Samples are returned as :class:`RuntimeStats`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from profiling.stats import summarize
from shared.models import RuntimeStats

WARMUP_S = 0.05
WARMUP_MIN_CALLS = 3
WARMUP_MAX_CALLS = 10_000
DEFAULT_L2_BYTES = 64 * 2**20
HOST_LEAD_S = 500e-6  # GPU sleep that covers the host's enqueueing of event + call


def time_kernel(fn: Callable[[], Any], device: str, num_trials: int) -> RuntimeStats:
    """Time ``fn`` ``num_trials`` times after warming it up."""
    if device == "cuda":
        return _time_cuda(fn, num_trials)
    return _time_cpu(fn, num_trials)


def _warm_up(fn: Callable[[], Any], sync: Callable[[], None]) -> None:
    start = time.perf_counter()
    calls = 0
    while calls < WARMUP_MIN_CALLS or (
        time.perf_counter() - start < WARMUP_S and calls < WARMUP_MAX_CALLS
    ):
        fn()
        sync()
        calls += 1


def _time_cpu(fn: Callable[[], Any], num_trials: int) -> RuntimeStats:
    _warm_up(fn, lambda: None)
    samples = []
    for _ in range(num_trials):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return summarize(samples, "cpu_perf_counter", "cpu")


def l2_flush_buffer() -> Any:
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2_bytes = int(getattr(props, "L2_cache_size", 0)) or DEFAULT_L2_BYTES
    return torch.empty(2 * l2_bytes // 4, dtype=torch.int32, device="cuda")


def _time_cuda(fn: Callable[[], Any], num_trials: int) -> RuntimeStats:
    import torch

    sync = torch.cuda.synchronize
    _warm_up(fn, sync)
    flush = l2_flush_buffer()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(num_trials)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(num_trials)]
    sleep = _gpu_sleep_fn()
    for start, end in zip(starts, ends):
        flush.zero_()
        sleep()
        start.record()
        fn()
        end.record()
        sync()
    samples = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return summarize(samples, "cuda_event+l2_flush", "cuda")


def _gpu_sleep_fn() -> Callable[[], None]:
    """A call that occupies the GPU for about HOST_LEAD_S (a no-op if torch lacks _sleep)."""
    import torch

    spin = getattr(torch.cuda, "_sleep", None)
    if spin is None:
        return lambda: None
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    clock_hz = getattr(props, "clock_rate", 1_500_000) * 1e3  # kHz in the properties
    cycles = int(HOST_LEAD_S * clock_hz)
    return lambda: spin(cycles)
