"""Time a call inside a job process, with primitives bound before any user code is imported.

:func:`bind` runs while the process is still clean and returns a :class:`Timer` whose CUDA and
clock functions were looked up then. Its figures are the number only for /evaluate, which has
no reference to judge by (cross-checked as below); a comparison's figures are the judge's own
(:mod:`judge.clock`), and in a comparison this timer only warms the call up, flushes the L2 on
the judge's side, and takes the kernel's process's own figures shown beside the number.

One timing run (:meth:`Timer.run`) has these parts:

1. **Warm-up** (:meth:`Timer.warm_up`): at least 3 calls and 20 ms, then until the time per
   call of one 5 ms window is within 2% of the window's before (the clocks and caches have
   settled), 50 ms at most; a call of 1 ms and more then lets the GPU idle 50 ms, so a power
   cap the warm-up reached is not carried into the samples. A quick answer (the request fixed
   fewer than ``MIN_SAMPLES`` samples) gets the 3 calls only, and its figures say so
   (``warm_up_reason``).
2. **Event samples** (:meth:`Timer.sample`): fresh inputs (:data:`Refill`), an L2 flush (a
   *read* over twice the L2: it evicts everything and leaves no dirty lines for the timed call
   to write back, as under Nsight Compute's cache control), a one-element kernel, a device
   synchronise, the stream held until the host has enqueued the start event and the call
   (:mod:`harness.stream_gate`; a short GPU sleep where the driver cannot), so the interval
   holds the GPU's work, not the launch latency; the events, a device synchronise. How many:
   the request's count or :mod:`shared.stopping`'s adaptive rule. The events around no work,
   read just after the warm-up (:meth:`Timer.measure_zero`), are subtracted from each sample
   by the server.
3. **Extras** (:meth:`Timer.extras`), independent of the events: device-synchronised host
   intervals (never below the GPU's work), CUPTI activity on every stream of the process
   (``cupti-python``), and two figures beside the number: back-to-back calls for kernels of
   :data:`BACK_TO_BACK_FROM_MS` and more (the figure under sustained load), and a CUDA-graph
   replay for kernels under :data:`harness.device_checks.GRAPH_BELOW_MS` (the figure
   without launch overhead). Skipped when the request fixed fewer than ``MIN_SAMPLES``
   samples. The CUPTI record and the graph replay live in :mod:`harness.device_checks`.

After a timing run the kernel's process observes one more call (:meth:`Timer.observe`): the
math modes torch had set around it (:mod:`harness.math_modes`) and, on a GPU, the launches
CUPTI recorded (:func:`harness.device_checks.launch_records`), for the result's launch
provenance (:mod:`profiling.provenance`). It costs one call and, on a GPU, switching CUPTI's
collection on and off around it.

On the CPU each sample is a ``perf_counter_ns`` interval, and the back-to-back figure is N
calls between two clock reads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

from harness.device_checks import ActivityTracer, GraphCapture, launch_records, union_ns
from harness.figures import clamp, describe, median
from shared.observations import CallTrace
from shared.protocol import TimingReport
from shared.stopping import MIN_SAMPLES, StoppingRule, sample_until

WARMUP_S = 0.05  # the longest a warm-up runs
WARMUP_MIN_CALLS = 3
# A warm-up runs at least WARMUP_LEAST_S, then stops once the mean time per call over one
# window of WARMUP_WINDOW_S is within WARMUP_STEADY of the window's before it: a GPU that has
# been busy a moment is at its clocks, and a small problem's job does not pay WARMUP_S.
WARMUP_LEAST_S = 0.02
WARMUP_WINDOW_S = 0.005
WARMUP_STEADY = 0.02
WARMUP_MAX_CALLS = 10_000
# A kernel of BACK_TO_BACK_FROM_MS and more, run back to back through the warm-up, can push the
# GPU under its power cap, and the lower clocks then outlast the warm-up into the samples
# (one evaluation in ten of a bf16 8192x8192 matmul on an H100 had every sample 8% slower):
# such a kernel's samples start after the GPU idled as long as the warm-up ran.
REST_AFTER_WARMUP_S = WARMUP_S
DEFAULT_L2_BYTES = 64 * 2**20
GUESSED_SM_CLOCK_KHZ = 1_500_000  # where the device does not say its highest SM clock
# The events' own interval around no work (the start event's and end event's entry and exit
# on the device: 1.28 us on an H100), measured this many times after each warm-up and
# subtracted by the server from every sample, so that a kernel's figure is its work's, as
# Nsight Compute's gpu__time_duration counts it.
EVENT_ZERO_SAMPLES = 11
HOST_LEAD_S = 500e-6  # GPU sleep that covers the host's enqueueing of event + call, where the
# stream cannot be held on host memory (harness.stream_gate)
ACTIVITY_CALLS = 10
HOST_SYNC_SAMPLES = 10
# The cross-checks take up to that many calls whatever the event sample count, as far as this
# much GPU time allows: one host sample is one scheduler hiccup away from a false reading.
CROSS_CHECK_MS = 20.0
BACK_TO_BACK_FROM_MS = 1.0
BACK_TO_BACK_ROUND_MS = 50.0
BACK_TO_BACK_ROUNDS = 5
BACK_TO_BACK_CALLS = (2, 1000)  # calls per round, at least and at most
Refill = Callable[[int], None]
NO_GPU = "no GPU: kernel launches are not observable on the CPU"


class Timer:
    """The in-process timer of one device (see the module docstring); made by :func:`bind`."""

    method = "cpu_perf_counter"
    device: Literal["cuda", "cpu"] = "cpu"

    def __init__(self) -> None:
        from harness.math_modes import ModeReader

        self._now = time.perf_counter_ns
        self._modes = ModeReader()
        # the host's time enqueueing the last sample while its stream was held (GPU), ms
        self.enqueue_ms: float | None = None
        self._pause = time.sleep
        self._until = sample_until
        self._rule_for = StoppingRule.for_request
        self.rested_ms = 0.0  # the last warm-up's rest (GPU), ms
        # the timer's reading of no work (measure_zero; 0 on the CPU: a perf_counter pair
        # costs well under its samples' noise), ms
        self.event_zero_ms = 0.0
        # the enqueue times of measure_zero's calls of no work (GPU), ms
        self.null_enqueue_ms: list[float] = []
        # how long warm_up calls the kernel (at least WARMUP_MIN_CALLS times); a worker's
        # rehearsal, which only touches the code paths, sets it to 0 for its own runs
        self.warmup_s = WARMUP_S

    # ---- the parts

    def sync(self) -> None:
        """Wait for the device (nothing on the CPU)."""

    def flush(self) -> None:
        """Evict the L2 (nothing on the CPU)."""

    def measure_zero(self) -> None:
        """Read the timer around no work into :attr:`event_zero_ms`, on a device just warmed
        (at process start an idle GPU's clocks read it up to twice as long); nothing on the
        CPU."""

    def warm_up(self, fn: Callable[[], Any], quick: bool = False) -> tuple[int, float]:
        """Warm ``fn`` up (see the module docstring), then rest if it is long: (calls, ms
        spent calling); the rest's length is left in :attr:`rested_ms`. ``quick``: the fewest
        calls only."""
        now, sync = self._now, self.sync
        start = now()
        most_ns = 0.0 if quick else self.warmup_s * 1e9
        steady = Steadiness(min(most_ns, WARMUP_LEAST_S * 1e9), WARMUP_WINDOW_S * 1e9, start)
        calls = 0
        while True:
            fn()
            sync()
            calls += 1
            at = now()
            if calls >= WARMUP_MIN_CALLS and (at - start >= most_ns or calls >= WARMUP_MAX_CALLS
                                               or steady.reached(at, calls)):
                break
        spent_ms = (now() - start) / 1e6
        self.measure_zero()
        self._rest(spent_ms / calls)
        self.rested_ms = (now() - start) / 1e6 - spent_ms
        return calls, spent_ms

    def _rest(self, call_ms: float) -> None:
        """After the warm-up (a GPU's power state; nothing on the CPU)."""

    def sample(self, fn: Callable[[], Any], flush: bool = True) -> tuple[float, Any]:
        """One sample of ``fn``: (ms, what it returned)."""
        now = self._now
        t0 = now()
        result = fn()
        t1 = now()
        return (t1 - t0) / 1e6, result

    def extras(self, fn: Callable[[], Any], median_ms: float, samples: int,
               num_trials: int | None, cross_checks: bool = True) -> TimingReport:
        """The figures beside the samples (``event_ms`` left empty); ``cross_checks``: with
        the independent measures of the event figure (GPU)."""
        report = TimingReport(method=self.method, event_ms=[])
        with spending(report, "back_to_back", self._now):
            self._back_to_back(report, fn, median_ms, num_trials)
        report.graph_reason = "no CUDA graphs on the CPU"
        return report

    def observe(self, fn: Callable[[], Any], input_dtypes: list[str]) -> CallTrace:
        """One more call of ``fn``, observed by this process (see the module docstring);
        ``input_dtypes``: those of its tensor arguments, said with it."""
        now, reader = self._now, self._modes
        began = now()
        trace = CallTrace(device=self.device, modes_before=reader.read(),
                          input_dtypes=list(input_dtypes))
        with reader.watching() as seen:
            self._launches(fn, trace)
        trace.modes_set = list(seen)
        trace.modes_after = reader.read()
        trace.cost_ms = (now() - began) / 1e6
        return trace

    def _launches(self, fn: Callable[[], Any], trace: CallTrace) -> None:
        """Call ``fn`` once into ``trace`` (no launch is observable on the CPU)."""
        self._plain(fn, trace)
        trace.unobservable = NO_GPU

    def _plain(self, fn: Callable[[], Any], trace: CallTrace) -> None:
        now = self._now
        t0 = now()
        try:
            fn()
            self.sync()
        except Exception as exc:  # noqa: BLE001 - the trace says so; the timing is done
            trace.call_error = describe(exc)
        trace.wall_ms = (now() - t0) / 1e6

    # ---- a whole run, in one process

    def run(self, fn: Callable[[], Any], num_trials: int | None,
            refill: Refill | None) -> TimingReport:
        """Warm-up, samples (``refill(i)`` before sample ``i``), extras: the raw report."""
        calls, warm_ms = self.warm_up(fn, few(num_trials))

        enqueue: list[float] = []

        def take(i: int) -> float:
            if refill is not None:
                refill(i)
            ms = self.sample(fn)[0]
            if self.enqueue_ms is not None:
                enqueue.append(self.enqueue_ms)
            return ms

        rule = self._rule_for(num_trials)
        began = self._now()
        event_ms, stopped_by = self._until(take, lambda: self._now() / 1e9, rule)
        sampling_ms = (self._now() - began) / 1e6
        report = self.extras(fn, median(event_ms), len(event_ms), num_trials)
        report.event_ms = event_ms
        report.warmup_calls, report.warmup_ms = calls, warm_ms
        report.warmup_reason = quick_warm_up_reason(num_trials)
        report.spent_ms.update(warm_up=warm_ms, rest=self.rested_ms, samples=sampling_ms)
        report.sample_rule = "adaptive" if rule.adaptive else "fixed"
        report.stopped_by, report.sampling_ms = stopped_by, sampling_ms
        report.fresh_inputs = len(event_ms) if refill is not None else 0
        report.event_zero_ms = self.event_zero_ms
        report.enqueue_ms, report.null_enqueue_ms = enqueue, list(self.null_enqueue_ms)
        return report

    def _back_to_back(self, report: TimingReport, fn: Callable[[], Any], median_ms: float,
                      num_trials: int | None) -> None:
        reason = None
        if few(num_trials):
            reason = few_reason(num_trials)
        elif median_ms < BACK_TO_BACK_FROM_MS:
            reason = (f"not measured: the median {median_ms:.4g} ms is under "
                      f"{BACK_TO_BACK_FROM_MS:g} ms")
        if reason is not None:
            report.back_to_back_reason = reason
            return
        calls = clamp(BACK_TO_BACK_ROUND_MS / median_ms, *BACK_TO_BACK_CALLS)
        rounds = [self._span(fn, calls) for _ in range(BACK_TO_BACK_ROUNDS)]
        report.back_to_back_ms = median([r / calls for r in rounds])
        report.back_to_back_calls = calls
        report.back_to_back_round_ms = rounds

    def _span(self, fn: Callable[[], Any], calls: int) -> float:
        now = self._now
        t0 = now()
        for _ in range(calls):
            fn()
        return (now() - t0) / 1e6


def _nothing() -> None:
    return None


@contextmanager
def spending(report: TimingReport, part: str, now: Callable[[], int]) -> Iterator[None]:
    """Add the wall time of the block to ``report.spent_ms[part]``."""
    began = now()
    try:
        yield
    finally:
        report.spent_ms[part] = report.spent_ms.get(part, 0.0) + (now() - began) / 1e6


class CudaTimer(Timer):
    """CUDA events around each call; the independent measures beside them (see above)."""

    method = "cuda_event+l2_flush"
    device: Literal["cuda", "cpu"] = "cuda"

    def __init__(self) -> None:
        super().__init__()
        import torch

        self._sync = torch._C._cuda_synchronize
        self._record = torch._C._CudaEventBase.record
        self._elapsed = torch._C._CudaEventBase.elapsed_time
        self._stream = torch.cuda.current_stream()
        self._gpu_sleep = getattr(torch._C, "_cuda_sleep", None)
        self._read_all = torch.Tensor.sum
        self._uint8 = torch.uint8
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        l2_bytes = int(getattr(props, "L2_cache_size", 0)) or DEFAULT_L2_BYTES
        clock_khz = getattr(props, "clock_rate", 0)
        # without the device's highest SM clock (CUDA 13 dropped it from the properties) a
        # sleep's cycles are counted at a guess: it lasts longer or shorter than asked
        self._clock_hz = (clock_khz or GUESSED_SM_CLOCK_KHZ) * 1e3
        self._lead_cycles = int(HOST_LEAD_S * self._clock_hz)
        self._flush_buffer = torch.zeros(2 * l2_bytes // 4, dtype=torch.int32, device="cuda")
        # a one-element kernel before every sample: the call is then never the first kernel
        # after the flush's large reduction, nor the first after the GPU switched to this
        # process's context (a judged sample); in either place a cuBLAS fp16 2048 matmul read
        # ~0.9 us more on the H100 (Nsight Compute's cache control runs no kernel before it)
        self._clear, self._one = torch.Tensor.zero_, torch.zeros(1, device="cuda")
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)
        self._tracer = ActivityTracer.start()
        self._graphs = GraphCapture(torch)
        self._union_ns = union_ns
        self._launch_records = launch_records
        from harness.stream_gate import open_gate

        # the lead: the stream held until the call is enqueued (a GPU sleep where it cannot be)
        self._gate = open_gate(torch, self._stream)
        self.lead = "stream_gate" if self._gate is not None else "gpu_sleep"

    def sync(self) -> None:
        self._sync()

    def flush(self) -> None:
        self._read_all(self._flush_buffer)
        self._clear(self._one)

    def measure_zero(self) -> None:
        zeros, self.null_enqueue_ms = [], []
        for _ in range(EVENT_ZERO_SAMPLES):
            zeros.append(self.between_events(_nothing))
            if self.enqueue_ms is not None:
                self.null_enqueue_ms.append(self.enqueue_ms)
        self.event_zero_ms = median(zeros)

    def _rest(self, call_ms: float) -> None:
        self._pause(rest_after_warm_up_s(call_ms))

    def sample(self, fn: Callable[[], Any], flush: bool = True) -> tuple[float, Any]:
        if flush:
            self._read_all(self._flush_buffer)
        self._clear(self._one)
        self._sync()
        now = self._now
        held = now()
        gate = self._gate
        if gate is not None:
            gate.hold()
        elif self._gpu_sleep is not None:
            self._gpu_sleep(self._lead_cycles)
        try:
            self._record(self._start, self._stream)
            result = fn()
            self._record(self._end, self._stream)
        finally:
            if gate is not None:
                gate.release()
        self.enqueue_ms = (now() - held) / 1e6
        self._sync()
        return float(self._elapsed(self._start, self._end)), result

    def between_events(self, work: Callable[[], None]) -> float:
        """``work`` between two events on the timed stream, after a GPU sleep lead (ms)."""
        return self.sample(work, flush=False)[0]

    def _span(self, fn: Callable[[], Any], calls: int) -> float:
        def loop() -> None:
            for _ in range(calls):
                fn()
        return self.between_events(loop)

    def extras(self, fn: Callable[[], Any], median_ms: float, samples: int,
               num_trials: int | None, cross_checks: bool = True) -> TimingReport:
        report = TimingReport(method=self.method, event_ms=[])
        now = self._now
        if cross_checks:
            self._cross_checks(report, fn, median_ms, samples)
        with spending(report, "back_to_back", now):
            self._back_to_back(report, fn, median_ms, num_trials)
        with spending(report, "graph", now):
            if few(num_trials):
                report.graph_reason = few_reason(num_trials)
            elif report.host_sync_ms:
                self._graphs.figure(report, fn, median_ms, median(report.host_sync_ms),
                                    self.between_events)
            else:
                self._graphs.figure(report, fn, median_ms, median_ms, self.between_events)
        return report

    def _cross_checks(self, report: TimingReport, fn: Callable[[], Any], median_ms: float,
                      samples: int) -> None:
        """Device-synchronised host intervals and CUPTI's device activity of the call."""
        sync, now, flush = self._sync, self._now, self.flush
        with spending(report, "host_sync", now):
            for _ in range(cross_check_calls(samples, median_ms, HOST_SYNC_SAMPLES)):
                flush()
                sync()
                t0 = now()
                fn()
                sync()
                report.host_sync_ms.append((now() - t0) / 1e6)
                # the same steps around no work, beside each: the interval's own cost
                flush()
                sync()
                t0 = now()
                sync()
                report.null_host_ms.append((now() - t0) / 1e6)
        with spending(report, "activity", now):
            report.device_busy_calls = cross_check_calls(samples, median_ms, ACTIVITY_CALLS)
            report.device_busy_ms, report.device_busy_error = self._device_busy_ms(
                fn, report.device_busy_calls)

    def _launches(self, fn: Callable[[], Any], trace: CallTrace) -> None:
        tracer = self._tracer
        if tracer.error is not None:
            self._plain(fn, trace)
            trace.unobservable = f"no launch observed: {tracer.error}"
            return
        try:
            activities, trace.wall_ms, failed = tracer.collect(fn, 1, self._sync)
        except Exception as exc:  # noqa: BLE001 - CUPTI itself failed: said, not raised
            trace.unobservable = f"the launch trace failed: {describe(exc)}"
            return
        if failed is not None:
            trace.call_error = describe(failed)
        trace.launches, trace.left_out, trace.left_out_ms = self._launch_records(
            activities, tracer.demangle)
        trace.device_busy_ms = self._union_ns(
            [(a.start, a.end) for a in activities if a.kind]) / 1e6

    def _device_busy_ms(self, fn: Callable[[], Any], calls: int) -> tuple[float | None, str | None]:
        tracer = self._tracer
        if tracer.error is not None:
            return None, tracer.error
        try:
            intervals = tracer.trace(fn, calls, self._sync)
        except Exception as exc:  # noqa: BLE001 - a missing trace is itself a finding
            return None, f"the device activity trace failed: {type(exc).__name__}: {exc}"
        if not intervals:
            return 0.0, None
        return self._union_ns(intervals) / 1e6 / calls, None


def bind(device: str) -> Timer:
    """A timer for ``device`` whose primitives are fixed now, before user code exists."""
    return CudaTimer() if device == "cuda" else Timer()


class Steadiness:
    """When a warm-up has settled: ``least_ns`` past ``start``, and the mean time per call of
    the last window of ``window_ns`` within :data:`WARMUP_STEADY` of the window's before."""

    def __init__(self, least_ns: float, window_ns: float, start: float) -> None:
        self.least_ns, self.window_ns, self.start = least_ns, window_ns, start
        self.window_start, self.window_calls = start, 0
        self.last_per_call: float | None = None

    def reached(self, at: float, calls: int) -> bool:
        """After call number ``calls`` ended at ``at`` (ns)."""
        if at - self.window_start < self.window_ns:
            return False
        per_call = (at - self.window_start) / (calls - self.window_calls)
        last, self.last_per_call = self.last_per_call, per_call
        self.window_start, self.window_calls = at, calls
        return (at - self.start >= self.least_ns and last is not None
                and abs(per_call - last) <= WARMUP_STEADY * last)


# ---- small pure helpers (the server's statistics use some of them too) ----------------------


def rest_after_warm_up_s(call_ms: float) -> float:
    """How long the GPU idles between the warm-up and the samples of a call of ``call_ms``."""
    return REST_AFTER_WARMUP_S if call_ms >= BACK_TO_BACK_FROM_MS else 0.0


def few(num_trials: int | None) -> bool:
    """A request that fixed fewer samples than the adaptive minimum wants a quick answer."""
    return num_trials is not None and num_trials < MIN_SAMPLES


def quick_warm_up_reason(num_trials: int | None) -> str | None:
    """Why the warm-up was the fewest calls only (None: it was not)."""
    if not few(num_trials):
        return None
    return (f"shortened to {WARMUP_MIN_CALLS} calls (not until steady): the request "
            f"fixed {num_trials} samples, fewer than {MIN_SAMPLES}, so it wants a quick answer")


def few_reason(num_trials: int | None) -> str:
    return (f"not measured: the request fixed {num_trials} samples, fewer than {MIN_SAMPLES} "
            "(the figures beside the number are taken for fuller runs)")


def cross_check_calls(samples: int, median_ms: float, most: int) -> int:
    """Calls for an independent measure: ``most``, or as many as CROSS_CHECK_MS of GPU time
    holds, but never fewer than the event samples (up to ``most``)."""
    affordable = int(CROSS_CHECK_MS / max(median_ms, 1e-3))
    return min(most, max(samples, affordable))
