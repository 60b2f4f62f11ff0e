"""The CUDA timer's independent measures beside its events (:class:`harness.timer.CudaTimer`):
a CUDA-graph replay of the call (:class:`GraphCapture`, the figure without launch overhead)
and CUPTI's record of the device's activity on every stream (:class:`ActivityTracer`, with
:func:`union_ns` for the time the device was busy, and :func:`launch_records` for what one
call launched, by name, grid, block and stream). Both are bound when the timer is, while the
process is still clean."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any, Literal, NamedTuple

from harness.figures import clamp, describe, median
from shared.observations import TRACE_LAUNCHES, TRACE_NAME_CHARS, TracedLaunch
from shared.protocol import TimingReport

# CUDA-graph figure: kernels under 100 us; a replay of about REPLAY_MS, REPLAYS replays. Graph
# launch costs ~10 us once per replay: at 20+ calls of its length, under 0.5% of a call.
GRAPH_BELOW_MS = 0.1
GRAPH_REPLAY_MS = 2.0
GRAPH_REPLAYS = 10
GRAPH_CALLS = (20, 200)
GRAPH_CAPTURE_MS = 10.0  # capturing costs the host about a call's host time per call
GRAPH_WARMUP_CALLS = 2  # on the capture stream, before capture (cuBLAS workspaces, lazy init)
REASON_CHARS = 500
# A traced call's launches: as many distinct ones as its record holds (the rest counted)
LAUNCHES_LISTED = TRACE_LAUNCHES
NAME_CHARS = TRACE_NAME_CHARS
# CUpti_ActivityMemcpyKind, by value
COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
              8: "DtoD", 9: "HtoH", 10: "PtoP"}


class GraphCapture:
    """The CUDA-graph figure: capture N calls on a side stream, replay, time.

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

    def figure(self, report: TimingReport, fn: Callable[[], Any], median_ms: float,
               host_ms: float, timed: Callable[[Callable[[], None]], float]) -> None:
        """Fill ``report``'s graph figure of ``fn`` (event median ``median_ms``)."""
        if median_ms >= GRAPH_BELOW_MS:
            report.graph_reason = (f"not measured: the median {median_ms:.4g} ms is not under "
                                   f"{GRAPH_BELOW_MS:g} ms, where launch overhead matters")
            return
        calls = clamp(min(GRAPH_REPLAY_MS / max(median_ms, 1e-6),
                          GRAPH_CAPTURE_MS / max(host_ms, 1e-6)), *GRAPH_CALLS)
        try:
            graph = self.capture(fn, calls)
        except Exception as exc:  # noqa: BLE001 - a kernel that cannot be captured: a finding
            self.settle()
            report.graph_reason = (
                "the call cannot be captured in a CUDA graph (it synchronises, allocates "
                f"outside PyTorch, or launches outside the current stream): {describe(exc)}"
            )[:REASON_CHARS]
            return
        try:
            replays = [timed(lambda: self.replay(graph)) for _ in range(GRAPH_REPLAYS)]
        except Exception as exc:  # noqa: BLE001
            report.graph_reason = f"the captured CUDA graph failed to replay: {describe(exc)}"
            return
        finally:
            self.settle()
            with suppress(Exception):
                self.reset(graph)
        report.graph_ms_per_call = median([r / calls for r in replays])
        report.graph_calls_per_replay = calls
        report.graph_replay_ms = replays

    def settle(self) -> None:
        """Leave no CUDA error pending from the capture (a launch's check raises it, and so
        clears it)."""
        with suppress(Exception):
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

    def _ends_cleanly(self, graph: Any) -> bool:
        try:
            self.capture_end(graph)
        except Exception:  # noqa: BLE001 - an invalidated capture ends with an error
            return False
        return True

    def abandon(self, graph: Any, pool: Any, ended: bool = False) -> None:
        """End a capture that failed and give its memory back (best effort): an invalidated
        capture raises from ``capture_end`` before PyTorch's allocator stops routing to the
        graph's pool; that step is then done here, and only then is the pool released."""
        self.set_stream(self.side)
        if not ended and self._ends_cleanly(graph):
            return
        if self.end_to_pool is not None:
            try:
                self.end_to_pool(self.device, tuple(pool))
            except Exception:  # noqa: BLE001 - capture_end got that far itself
                return
            if self.release_pool is not None:
                with suppress(Exception):
                    self.release_pool(self.device, tuple(pool))


_TRACER: ActivityTracer | None = None


class Activity(NamedTuple):
    """One CUPTI activity record: a kernel (its name, grid, block, stream), a memory copy or
    set (its direction or "memset", stream, bytes), or another kind ("")."""

    kind: str
    start: int
    end: int
    name: str = ""
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    stream: int | None = None
    bytes: int | None = None


class ActivityTracer:
    """CUPTI activity records (kernels, copies, sets on every stream), through ``cupti-python``.

    Started once per process, while it is still clean; collection is switched on only around
    the calls it measures. One per process: CUPTI delivers its records to the callbacks
    registered last, so a second tracer would leave the first one's records empty for good.
    """

    def __init__(self) -> None:
        self.error: str | None = None
        self.records: list[Activity] = []
        self.demangle: Callable[[str], str | None] = _no_demangling

    @classmethod
    def start(cls) -> ActivityTracer:
        global _TRACER
        if _TRACER is None:
            _TRACER = cls._start()
        return _TRACER

    @classmethod
    def _start(cls) -> ActivityTracer:
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
            kernel, memcpy, memset = (_code(k) for k in kinds)
            records = tracer.records

            def requested() -> tuple[int, int]:
                return 8 * 2**20, 0

            def completed(activities: list[Any]) -> None:
                for a in activities:
                    start, end = getattr(a, "start", None), getattr(a, "end", None)
                    if start is not None and end is not None and end >= start:
                        records.append(_activity(a, int(start), int(end), kernel, memcpy,
                                                 memset))

            enable, disable, flush = (cupti.activity_enable, cupti.activity_disable,
                                      cupti.activity_flush_all)
            cupti.activity_register_callbacks(requested, completed)
            now = time.perf_counter_ns

            def collect(fn: Callable[[], Any], calls: int, sync: Callable[[], None]
                        ) -> tuple[list[Activity], float, BaseException | None]:
                sync()
                flush(1)
                records.clear()
                for kind in kinds:
                    enable(kind)
                failed: BaseException | None = None
                t0 = now()
                try:
                    for _ in range(calls):
                        fn()
                        sync()
                except Exception as exc:  # noqa: BLE001 - the caller says what failed
                    failed = exc
                finally:
                    wall_ms = (now() - t0) / 1e6
                    for kind in kinds:
                        disable(kind)
                    flush(1)
                return list(records), wall_ms, failed

            def trace(fn: Callable[[], Any], calls: int,
                      sync: Callable[[], None]) -> list[tuple[int, int]]:
                found, _, failed = collect(fn, calls, sync)
                if failed is not None:
                    raise failed
                return [(r.start, r.end) for r in found]

            tracer.collect = collect  # type: ignore[method-assign]
            tracer.trace = trace  # type: ignore[method-assign]
            tracer.demangle = _demangler()
            import torch

            warm = torch.empty(1024, device="cuda")
            trace(lambda: warm.zero_(), 1, torch._C._cuda_synchronize)
        except Exception as exc:  # noqa: BLE001
            tracer.error = f"CUPTI activity tracing is unavailable: {type(exc).__name__}: {exc}"
        return tracer

    def trace(self, fn: Callable[[], Any], calls: int,
              sync: Callable[[], None]) -> list[tuple[int, int]]:
        """The (start, end) of every activity of ``calls`` calls of ``fn``, ns."""
        raise RuntimeError(self.error or "the tracer was not started")

    def collect(self, fn: Callable[[], Any], calls: int, sync: Callable[[], None]
                ) -> tuple[list[Activity], float, BaseException | None]:
        """The activities of ``calls`` calls of ``fn`` (each synchronised), the host's wall
        time of the calls (ms), and what a call raised (the activities up to it are kept)."""
        raise RuntimeError(self.error or "the tracer was not started")


def _activity(a: Any, start: int, end: int, kernel: int, memcpy: int, memset: int) -> Activity:
    """One record as CUPTI delivered it (its fields read now: the record is CUPTI's buffer)."""
    kind = getattr(a, "kind", None)
    try:
        code = _code(kind) if kind is not None else -1
        if code == kernel:
            name = getattr(a, "name", "") or ""
            if isinstance(name, bytes):
                name = name.decode(errors="replace")
            return Activity("kernel", start, end, str(name),
                            (int(a.grid_x), int(a.grid_y), int(a.grid_z)),
                            (int(a.block_x), int(a.block_y), int(a.block_z)), int(a.stream_id))
        if code == memcpy:
            return Activity("memcpy", start, end,
                            COPY_KINDS.get(int(getattr(a, "copy_kind", 0)), "copy"),
                            stream=int(a.stream_id), bytes=int(a.bytes))
        if code == memset:
            return Activity("memset", start, end, "memset", stream=int(a.stream_id),
                            bytes=int(a.bytes))
    except (AttributeError, TypeError, ValueError):
        pass  # a record of another layout still counts as activity
    return Activity("", start, end)


def _code(kind: Any) -> int:
    """An activity kind's number, from an int or an enum member."""
    return int(getattr(kind, "value", kind))


def _no_demangling(name: str) -> str | None:
    return None


def _demangler() -> Callable[[str], str | None]:
    """The C++ runtime's demangler (``__cxa_demangle``), or none where it cannot be loaded."""
    import ctypes

    try:
        lib = ctypes.CDLL("libstdc++.so.6")
        demangle = getattr(lib, "__cxa_demangle")
        free = ctypes.CDLL(None).free
    except (OSError, AttributeError):
        return _no_demangling
    demangle.restype = ctypes.c_void_p
    demangle.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                         ctypes.POINTER(ctypes.c_int)]
    free.argtypes = [ctypes.c_void_p]
    free.restype = None

    def readable(name: str) -> str | None:
        if not name.startswith("_Z"):
            return None
        status = ctypes.c_int(-1)
        pointer = demangle(name.encode(), None, None, ctypes.byref(status))
        if not pointer:
            return None
        try:
            text = ctypes.string_at(pointer)
        finally:
            free(pointer)
        return text.decode(errors="replace") if status.value == 0 else None

    return readable


def launch_records(activities: list[Activity], demangle: Callable[[str], str | None]
                   ) -> tuple[list[TracedLaunch], int, float]:
    """One call's activities as launches, alike ones counted together, in the order they
    started: (the first :data:`LAUNCHES_LISTED`, how many more there were, their device ms)."""
    groups: dict[tuple[Any, ...], TracedLaunch] = {}
    for a in sorted(activities, key=lambda r: r.start):
        if not a.kind:
            continue
        key = (a.kind, a.name, a.grid, a.block, a.stream)
        ms = (a.end - a.start) / 1e6
        found = groups.get(key)
        if found is None:
            readable = demangle(a.name) if a.kind == "kernel" else None
            groups[key] = TracedLaunch(
                kind=_KINDS[a.kind], name=_clipped(a.name),
                demangled=_clipped(readable) if readable else None,
                grid=list(a.grid) if a.grid else None, block=list(a.block) if a.block else None,
                stream=a.stream, device_ms=ms, bytes=a.bytes)
            continue
        found.count += 1
        found.device_ms += ms
        if a.bytes is not None:
            found.bytes = (found.bytes or 0) + a.bytes
    launches = list(groups.values())
    rest = launches[LAUNCHES_LISTED:]
    return launches[:LAUNCHES_LISTED], len(rest), sum(r.device_ms for r in rest)


_KINDS: dict[str, Literal["kernel", "memcpy", "memset"]] = {
    "kernel": "kernel", "memcpy": "memcpy", "memset": "memset"}


def _clipped(text: str) -> str:
    return text if len(text) <= NAME_CHARS else text[:NAME_CHARS - 1] + "…"


def union_ns(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total
