"""Time a kernel call in the worker, with primitives bound before any user code is imported.

:func:`bind` runs while the worker is still clean (before the job's sources are imported) and
returns a :class:`Timer` whose every CUDA and clock function was looked up then and is held
in a closure: patching ``torch.cuda.Event.elapsed_time``, ``torch.cuda.synchronize``,
``torch.cuda.CUDAGraph.replay``, ``time.perf_counter`` or this module from user code changes
nothing here. The timer returns raw samples only; the statistics and the verdict on them are
made by the server (:mod:`profiling.integrity`), which the kernel cannot reach.

On a GPU one timing run has these parts:

1. **Event samples** (the figure reported, the *isolated* regime): before each sample the
   inputs are refilled with fresh values (so a cache keyed by content or pointer never hits),
   the L2 is flushed (a *read* over twice its size: it evicts everything and writes back what
   the previous call left dirty, so the timed call starts on a clean L2, as under Nsight
   Compute's cache control; a zeroing flush, as ``do_bench``'s, leaves the L2 full of dirty
   lines the timed call then pays to write back, ~20% of a 20 µs memory-bound kernel on an
   H100, see ``scripts/probe_flush.py``), and the device synchronised; then a short
   GPU sleep keeps the device busy while the host enqueues the start event and the call, so
   the interval holds the GPU's work and not the host's launch latency; after the end event
   the *whole device* is synchronised, so work left on other streams cannot leak into the next
   sample. How many: the request's count, or :mod:`profiling.stopping`'s adaptive rule.
   A kernel of a millisecond and more first lets the GPU idle as long as its warm-up ran
   (:data:`REST_AFTER_WARMUP_S`), so a power cap the warm-up reached is not carried into it.
2. **Device activity** (independent): a few calls under CUPTI's activity API (NVIDIA's
   ``cupti-python``), which records every kernel, copy and set on every stream of the
   process, whoever launched it (C++ streams, cuBLAS handles, other threads). Busy time per
   call is the union of those intervals over the calls.
3. **Host-synchronised samples** (independent): device sync, host clock, call, device sync,
   host clock; these include launch overhead and so are never below the GPU's work.
4. **Back-to-back figure** (kernels of :data:`BACK_TO_BACK_FROM_MS` and more): N calls with no
   pause and no flush between two events, divided by N (``do_bench``'s loop), a few rounds:
   the figure under sustained load, where a power-limited kernel runs at lower clocks.
5. **CUDA-graph figure** (kernels under :data:`GRAPH_BELOW_MS`): the call captured N times
   into one CUDA graph on a side stream after warm-up (``triton.testing.do_bench_cudagraph``),
   replayed a few times between two events, divided by N: the figure without launch overhead.
   A call that cannot be captured (it synchronises, allocates outside PyTorch's allocator,
   launches on the legacy stream) gets no figure and the reason. Last, because a failed
   capture may leave the allocator's bookkeeping in a poorer state.

Parts 4 and 5 are skipped when the request fixed fewer than ``MIN_SAMPLES`` samples: such a
request wants a quick answer.

**The audit** (:class:`SampleAudit`, the custom kernel of a comparison): after each event
sample, with probability 1/n at the n-th, that sample's outputs replace the copy kept so far
(reservoir sampling: each sample equally likely to be the one kept, each pick made after its
sample ran, from the OS's random source bound here); a large output is kept as its values at
random positions drawn then. The checker later compares the kept
outputs with the reference's on the same inputs, so a kernel that computes only when it is
checked (it tells a timing loop from a check by the pause between calls, the call stack, a
call count) is wrong on the sample most likely to be looked at. The copy is made after the
sample's end event, outside every timed interval. On the CPU each sample is a ``perf_counter_ns`` interval, and the
back-to-back figure is N calls between two clock reads.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Protocol

from profiling.stopping import MIN_SAMPLES, StoppingRule, sample_until

WARMUP_S = 0.05
WARMUP_MIN_CALLS = 3
WARMUP_MAX_CALLS = 10_000
# A kernel of BACK_TO_BACK_FROM_MS and more, run back to back through the warm-up, can push the
# GPU under its power cap; the lower clocks then outlast the warm-up into the samples (seen on
# the H100: one evaluation in ten of a bf16 8192x8192 matmul had all its samples 8% slower, at
# ~1.5 GHz against ~1.9). Such a kernel's samples start after the GPU idled this long, as long
# as the warm-up, so every evaluation samples from the same unthrottled state. A fixed rest,
# within what the server's wall-clock check leaves a call (profiling.integrity).
REST_AFTER_WARMUP_S = WARMUP_S
DEFAULT_L2_BYTES = 64 * 2**20
HOST_LEAD_S = 500e-6  # GPU sleep that covers the host's enqueueing of event + call
ACTIVITY_CALLS = 10
HOST_SYNC_SAMPLES = 10
# The cross-checks take up to that many calls whatever the event sample count, as far as this
# much GPU time allows: one host sample is one scheduler hiccup away from a false flag.
CROSS_CHECK_MS = 20.0
# Back-to-back figure: kernels of 1 ms and more, ROUNDS rounds of about ROUND_MS each.
BACK_TO_BACK_FROM_MS = 1.0
BACK_TO_BACK_ROUND_MS = 50.0
BACK_TO_BACK_ROUNDS = 5
BACK_TO_BACK_CALLS = (2, 1000)  # calls per round, at least and at most
# CUDA-graph figure: kernels under 100 us; a replay of about REPLAY_MS, REPLAYS replays. Graph
# launch costs ~10 us once per replay: at 20+ calls of its length, under 0.5% of a call.
GRAPH_BELOW_MS = 0.1
GRAPH_REPLAY_MS = 2.0
GRAPH_REPLAYS = 10
GRAPH_CALLS = (20, 200)  # calls per graph, at least and at most
# Capturing costs the host about a call's host time per call and is not in the report: kept
# near this, so that the server's wall-clock check (WALL_SLACK_MS) is not disturbed.
GRAPH_CAPTURE_MS = 10.0
GRAPH_WARMUP_CALLS = 2  # on the capture stream, before capture (cuBLAS workspaces, lazy init)
REASON_CHARS = 500

Refill = Callable[[int], None]
OutputsOf = Callable[[Any], list[Any]]


# What the audit keeps of each output: the whole tensor up to this many elements, else the
# values at this many positions drawn after the sample ran (a few MB whatever the output's
# size, so a multi-GB output costs the audit neither memory nor copy time).
AUDIT_WHOLE_ELEMENTS = 1 << 22
AUDIT_SAMPLED_ELEMENTS = 1 << 20


@dataclass
class KeptOutput:
    """One output of the audited sample: whole (``positions`` None) or sampled (``values``
    at the flat ``positions`` of a tensor of ``shape``)."""

    shape: list[int]
    values: Any
    positions: Any = None


class SampleAudit:
    """The outputs of one event sample, picked uniformly at random after the samples ran.

    ``offer(i, result)`` is called after sample ``i``'s end event; the n-th offer replaces
    what is kept with probability 1/n. ``outputs_of(result)`` turns what the timed call
    returned into the tensors a check compares (the backend's rule). Each output is kept
    whole when small, else sampled at random positions (:data:`AUDIT_WHOLE_ELEMENTS`), with
    primitives and a random source bound before user code. Outputs that are not plain
    tensors, or a copy that fails, end the audit with ``error`` set: the server then reports
    the timing as unaudited, never as checked.
    """

    def __init__(self, outputs_of: OutputsOf,
                 keep: Callable[[list[KeptOutput] | None, list[Any]], list[KeptOutput]],
                 pick: Callable[[int], bool]) -> None:
        self._outputs_of = outputs_of
        self._keep = keep
        self._pick = pick
        self.seen = 0
        self.index: int | None = None
        self.kept: list[KeptOutput] | None = None
        self.error: str | None = None

    def offer(self, i: int, result: Any) -> None:
        self.seen += 1
        if self.error is not None or not self._pick(self.seen):
            return
        try:
            self.kept = self._keep(self.kept, self._outputs_of(result))
            self.index = i
        except Exception as exc:  # noqa: BLE001 - reported, and the timing is then unaudited
            self.kept, self.index = None, None
            self.error = f"sample {i}'s outputs could not be kept: {_describe(exc)}"

    def report(self) -> dict[str, Any]:
        return {"sample": self.index, "samples": self.seen, "error": self.error}


class RunFn(Protocol):
    def __call__(self, fn: Callable[[], Any], samples: int | None, refill: Refill | None,
                 audit: SampleAudit | None = None) -> dict[str, Any]: ...


class Timer:
    """What :func:`bind` returns: ``run(fn, samples, refill, audit)`` → raw samples (a JSON
    dict); ``audit(outputs_of)`` → a :class:`SampleAudit` for ``run`` to fill.

    ``samples`` is the number of event samples, or None for the adaptive stopping rule.
    """

    def __init__(self, run: RunFn, method: str, audit: Callable[..., SampleAudit]) -> None:
        self.run = run
        self.method = method
        self.audit = audit


def _audit_factory(torch: Any, device: str) -> Callable[..., SampleAudit]:
    """:class:`SampleAudit` with its copy and random primitives bound now."""
    urandom = os.urandom
    tensor_type, parameter_type = torch.Tensor, torch.nn.Parameter
    clone, copy, detach = torch.Tensor.clone, torch.Tensor.copy_, torch.Tensor.detach
    numel, contiguous, is_contiguous = torch.Tensor.numel, torch.Tensor.contiguous, torch.Tensor.is_contiguous
    reshape, index_select, randint = torch.Tensor.reshape, torch.Tensor.index_select, torch.randint
    generators = {"cpu": torch.Generator()}
    if device == "cuda":
        generators["cuda"] = torch.Generator(device="cuda")

    def pick(n: int) -> bool:
        return int.from_bytes(urandom(8), "little") % n == 0

    def sampled(t: Any, n: int) -> KeptOutput:
        gen = generators.get(t.device.type, generators["cpu"])
        gen.manual_seed(int.from_bytes(urandom(8), "little") >> 1)
        positions = randint(0, n, (AUDIT_SAMPLED_ELEMENTS,), generator=gen, device=gen.device)
        flat = reshape(t if is_contiguous(t) else contiguous(t), (-1,))
        positions = positions if positions.device == flat.device else positions.to(flat.device)
        return KeptOutput(list(t.shape), index_select(flat, 0, positions), positions)

    def keep(kept: list[KeptOutput] | None, outputs: list[Any]) -> list[KeptOutput]:
        for t in outputs:
            if type(t) not in (tensor_type, parameter_type):
                raise TypeError(f"the timed call returned a {type(t).__module__}."
                                f"{type(t).__name__}, not a plain tensor")
        before = kept if kept is not None and len(kept) == len(outputs) else [None] * len(outputs)
        now: list[KeptOutput] = []
        for t, old in zip((detach(t) for t in outputs), before):
            n = numel(t)
            if n > AUDIT_WHOLE_ELEMENTS:
                now.append(sampled(t, n))
            elif old is not None and old.positions is None and old.values.shape == t.shape \
                    and old.values.dtype == t.dtype and old.values.device == t.device:
                copy(old.values, t)  # into the copy kept so far: no new memory
                now.append(old)
            else:
                now.append(KeptOutput(list(t.shape), clone(t)))
        return now

    def audit(outputs_of: OutputsOf, choose: Callable[[int], bool] | None = None) -> SampleAudit:
        return SampleAudit(outputs_of, keep, choose or pick)  # ``choose``: for tests

    return audit


def bind(device: str) -> Timer:
    """A timer for ``device`` whose primitives are fixed now, before user code exists."""
    if device == "cuda":
        return _bind_cuda()
    return _bind_cpu()


def _bind_cpu() -> Timer:
    now = time.perf_counter_ns
    until = sample_until
    rule_for = StoppingRule.for_request

    def run(fn: Callable[[], Any], samples: int | None, refill: Refill | None,
            audit: SampleAudit | None = None) -> dict[str, Any]:
        warm_calls, warm_ns = _warm_up(fn, lambda: None, now)

        def take(i: int) -> float:
            if refill is not None:
                refill(i)
            t0 = now()
            result = fn()
            ms = (now() - t0) / 1e6
            if audit is not None:
                audit.offer(i, result)
            return ms

        def span(calls: int) -> float:
            t0 = now()
            for _ in range(calls):
                fn()
            return (now() - t0) / 1e6

        rule = rule_for(samples)
        began = now()
        out, stopped_by = until(take, lambda: now() / 1e9, rule)
        sampling_ms = (now() - began) / 1e6
        median = _median(out)
        return {"method": "cpu_perf_counter", "event_ms": out, "warmup_calls": warm_calls,
                "warmup_ms": warm_ns / 1e6,
                **_sampling(rule, stopped_by, sampling_ms),
                **_back_to_back(span, median, samples),
                **_no_graph("no CUDA graphs on the CPU")}

    import torch

    return Timer(run, "cpu_perf_counter", _audit_factory(torch, "cpu"))


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
    pause = time.sleep
    until = sample_until
    rule_for = StoppingRule.for_request
    event_class = torch.cuda.Event
    record = torch._C._CudaEventBase.record
    elapsed = torch._C._CudaEventBase.elapsed_time
    stream = torch.cuda.current_stream()
    sleep = getattr(torch._C, "_cuda_sleep", None)
    read_all = torch.Tensor.sum
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2_bytes = int(getattr(props, "L2_cache_size", 0)) or DEFAULT_L2_BYTES
    clock_khz = getattr(props, "clock_rate", 0) or 1_500_000
    lead_cycles = int(HOST_LEAD_S * clock_khz * 1e3)
    flush = torch.zeros(2 * l2_bytes // 4, dtype=torch.int32, device="cuda")
    tracer = _ActivityTracer.start()
    capture = _GraphCapture(torch)

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

    def between_events(start: Any, end: Any, work: Callable[[], None]) -> float:
        """``work`` between two events on the timed stream, after a GPU sleep lead (ms)."""
        sync()
        if sleep is not None:
            sleep(lead_cycles)
        record(start, stream)
        work()
        record(end, stream)
        sync()
        return float(elapsed(start, end))

    def run(fn: Callable[[], Any], samples: int | None, refill: Refill | None,
            audit: SampleAudit | None = None) -> dict[str, Any]:
        warm_calls, warm_ns = _warm_up(fn, sync, now)
        pause(rest_after_warm_up_s(warm_ns / 1e6 / warm_calls))  # the server allows it
        start, end = event_class(enable_timing=True), event_class(enable_timing=True)

        def take(i: int) -> float:
            if refill is not None:
                refill(i)
            read_all(flush)
            sync()
            if sleep is not None:
                sleep(lead_cycles)
            record(start, stream)
            result = fn()
            record(end, stream)
            sync()
            ms = float(elapsed(start, end))
            if audit is not None:  # after the end event: the copy is in no interval (the
                audit.offer(i, result)  # next sample's refill and flush queue behind it)
            return ms

        def span(calls: int) -> float:
            def loop() -> None:
                for _ in range(calls):
                    fn()
            return between_events(start, end, loop)

        rule = rule_for(samples)
        began = now()
        event_ms, stopped_by = until(take, lambda: now() / 1e9, rule)
        sampling_ms = (now() - began) / 1e6
        median = _median(event_ms)
        host_ms = []
        for _ in range(_cross_check_calls(len(event_ms), median, HOST_SYNC_SAMPLES)):
            read_all(flush)
            sync()
            t0 = now()
            fn()
            sync()
            host_ms.append((now() - t0) / 1e6)
        busy_calls = _cross_check_calls(len(event_ms), median, ACTIVITY_CALLS)
        busy_ms, busy_error = device_busy_ms(fn, busy_calls)
        raw = {
            "method": "cuda_event+l2_flush", "event_ms": event_ms, "host_sync_ms": host_ms,
            "device_busy_ms": busy_ms, "device_busy_error": busy_error,
            "device_busy_calls": busy_calls,
            "warmup_calls": warm_calls, "warmup_ms": warm_ns / 1e6,
            **_sampling(rule, stopped_by, sampling_ms),
            **_back_to_back(span, median, samples),
        }
        if _few(samples):
            raw.update(_no_graph(_few_reason(samples)))
        else:
            raw.update(capture.figure(fn, median, _median(host_ms),
                                      lambda g: between_events(start, end, g)))
        return raw

    return Timer(run, "cuda_event+l2_flush", _audit_factory(torch, "cuda"))


class _GraphCapture:
    """The CUDA-graph figure: capture ``calls`` calls on a side stream, replay, time.

    Every torch function it uses is looked up here, in :func:`bind`, before user code runs.
    A failed capture is ended and its memory pool released, so the process goes on.
    """

    def __init__(self, torch: Any) -> None:
        self.sync = torch._C._cuda_synchronize
        self.new_graph = torch.cuda.CUDAGraph
        self.capture_begin = torch.cuda.CUDAGraph.capture_begin
        self.capture_end = torch.cuda.CUDAGraph.capture_end
        self.replay = torch.cuda.CUDAGraph.replay
        self.reset = torch.cuda.CUDAGraph.reset
        self.pool_handle = torch.cuda.graph_pool_handle
        self.end_to_pool = getattr(torch._C, "_cuda_endAllocateToPool", None)
        self.release_pool = getattr(torch._C, "_cuda_releasePool", None)
        self.current_stream = torch.cuda.current_stream
        self.set_stream = torch.cuda.set_stream
        self.wait_stream = torch.cuda.Stream.wait_stream
        self.side = torch.cuda.Stream()
        self.device = torch.cuda.current_device()
        self.zero = torch.Tensor.zero_
        self.probe = torch.zeros(1, device="cuda")

    def figure(self, fn: Callable[[], Any], median_ms: float, host_ms: float,
               timed: Callable[[Callable[[], None]], float]) -> dict[str, Any]:
        """The graph figure of ``fn`` (event median ``median_ms``, host time ``host_ms``)."""
        if median_ms >= GRAPH_BELOW_MS:
            return _no_graph(f"not measured: the median {median_ms:.4g} ms is not under "
                             f"{GRAPH_BELOW_MS:g} ms, where launch overhead matters")
        calls = _clamp(min(GRAPH_REPLAY_MS / max(median_ms, 1e-6),
                           GRAPH_CAPTURE_MS / max(host_ms, 1e-6)), *GRAPH_CALLS)
        try:
            graph = self.capture(fn, calls)
        except Exception as exc:  # noqa: BLE001 - a kernel that cannot be captured: a finding
            self.settle()
            return _no_graph("the call cannot be captured in a CUDA graph (it synchronises, "
                             "allocates outside PyTorch, or launches outside the current "
                             f"stream): {_describe(exc)}")
        try:
            replays = [timed(lambda: self.replay(graph)) for _ in range(GRAPH_REPLAYS)]
        except Exception as exc:  # noqa: BLE001
            return _no_graph(f"the captured CUDA graph failed to replay: {_describe(exc)}")
        finally:
            self.settle()
            with suppress(Exception):
                self.reset(graph)
        return {"graph_ms_per_call": _median([r / calls for r in replays]),
                "graph_calls_per_replay": calls, "graph_replay_ms": replays,
                "graph_reason": None}

    def settle(self) -> None:
        """Leave no CUDA error pending from the capture (an unchecked launch in user code that
        failed during it): a launch's check raises the pending error, and so clears it."""
        with suppress(Exception):  # a broken context is reported by the next step needing it
            self.sync()
        with suppress(Exception):
            self.zero(self.probe)
        with suppress(Exception):
            self.sync()

    def capture(self, fn: Callable[[], Any], calls: int) -> Any:
        origin = self.current_stream()
        self.sync()
        self.wait_stream(self.side, origin)
        self.set_stream(self.side)
        try:
            for _ in range(GRAPH_WARMUP_CALLS):
                fn()
            self.sync()
            graph = self.new_graph()
            pool = self.pool_handle()
            self.capture_begin(graph, pool=pool)
            try:
                for _ in range(calls):
                    fn()
            except BaseException:
                self.abandon(graph, pool)
                raise
            try:
                self.capture_end(graph)
            except BaseException:
                self.abandon(graph, pool, ended=True)
                raise
        finally:
            self.set_stream(origin)
        self.sync()
        return graph

    def abandon(self, graph: Any, pool: Any, ended: bool = False) -> None:
        """End a capture that failed and give its memory back (best effort).

        An invalidated capture raises from ``capture_end`` before PyTorch's allocator stops
        routing to the graph's pool; that step is then done here, and only then is the pool
        released (else the graph's own reset releases it, and twice would be an error).
        """
        self.set_stream(self.side)  # capture_end must run on the capturing stream
        if not ended:
            try:
                self.capture_end(graph)
                ended_cleanly = True
            except Exception:  # noqa: BLE001 - an invalidated capture ends with an error
                ended_cleanly = False
            if ended_cleanly:
                return
        if self.end_to_pool is not None:
            try:
                self.end_to_pool(self.device, tuple(pool))
            except Exception:  # noqa: BLE001 - capture_end got that far itself
                return
            if self.release_pool is not None:
                with suppress(Exception):
                    self.release_pool(self.device, tuple(pool))


def rest_after_warm_up_s(call_ms: float) -> float:
    """How long the GPU idles between the warm-up and the samples of a call of ``call_ms``."""
    return REST_AFTER_WARMUP_S if call_ms >= BACK_TO_BACK_FROM_MS else 0.0


def _sampling(rule: StoppingRule, stopped_by: str, sampling_ms: float) -> dict[str, Any]:
    return {"sample_rule": "adaptive" if rule.adaptive else "fixed", "stopped_by": stopped_by,
            "sampling_ms": sampling_ms}


def _few(samples: int | None) -> bool:
    """A request that fixed fewer samples than the adaptive minimum wants a quick answer."""
    return samples is not None and samples < MIN_SAMPLES


def _few_reason(samples: int | None) -> str:
    return (f"not measured: the request fixed {samples} samples, fewer than {MIN_SAMPLES} "
            "(the figures beside the number are taken for fuller runs)")


def _back_to_back(span: Callable[[int], float], median_ms: float,
                  samples: int | None) -> dict[str, Any]:
    """N calls back to back per round (``span(N)`` → ms), a few rounds: the per-call median."""
    reason = None
    if _few(samples):
        reason = _few_reason(samples)
    elif median_ms < BACK_TO_BACK_FROM_MS:
        reason = f"not measured: the median {median_ms:.4g} ms is under {BACK_TO_BACK_FROM_MS:g} ms"
    if reason is not None:
        return {"back_to_back_ms": None, "back_to_back_calls": 0, "back_to_back_round_ms": [],
                "back_to_back_reason": reason}
    calls = _clamp(BACK_TO_BACK_ROUND_MS / median_ms, *BACK_TO_BACK_CALLS)
    rounds = [span(calls) for _ in range(BACK_TO_BACK_ROUNDS)]
    return {"back_to_back_ms": _median([r / calls for r in rounds]), "back_to_back_calls": calls,
            "back_to_back_round_ms": rounds, "back_to_back_reason": None}


def _no_graph(reason: str) -> dict[str, Any]:
    return {"graph_ms_per_call": None, "graph_calls_per_replay": 0, "graph_replay_ms": [],
            "graph_reason": reason[:REASON_CHARS]}


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _cross_check_calls(samples: int, median_ms: float, most: int) -> int:
    """Calls for an independent measure: ``most``, or as many as CROSS_CHECK_MS of GPU time
    holds, but never fewer than the event samples (up to ``most``)."""
    affordable = int(CROSS_CHECK_MS / max(median_ms, 1e-3))
    return min(most, max(samples, affordable))


def _clamp(value: float, low: int, high: int) -> int:
    return max(low, min(high, int(value)))


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return 0.0
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


_TRACER: _ActivityTracer | None = None


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
        """The process's tracer, started on first use. One per process: CUPTI delivers its
        records to the last callbacks registered, so a second tracer (a second ``bind``, as
        the worker's rehearsal makes) would leave the first one's records empty for good."""
        global _TRACER
        if _TRACER is None:
            _TRACER = cls._start()
        return _TRACER

    @classmethod
    def _start(cls) -> _ActivityTracer:
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
