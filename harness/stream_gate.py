"""Hold a CUDA stream until the host has enqueued a call: the timer's lead, of no fixed length.

An event interval around a call must hold the GPU's work, not the host's launch latency, so
the GPU must not start the call's first event before the host has enqueued the whole call.
A GPU sleep of fixed cycles before the events does that, but its length follows the SM clock
(500 us at the boost clock is twice that at half of it): an interval taken from outside the
process (the judge's) then moves with the clock by hundreds of microseconds, and a process
that drops the sleep shortens what the judge sees by all of it.

The gate holds the stream on a word of pinned host memory instead
(``cuStreamWaitValue32``: the stream waits until the word reaches a value), which the host
writes the moment the call is enqueued: the lead is the enqueueing itself, whatever the
clock. A call that synchronises inside (``.item()``, a host copy) would wait for a release
that comes only after it returns; a watchdog thread releases every hold after
:data:`WATCHDOG_S`, so such a call waits that long, as it waited for the sleep before.
"""

from __future__ import annotations

import ctypes
import queue
import threading
import time
from typing import Any

from harness.handover import WAIT_GEQ, stream_memop

WATCHDOG_S = 0.002


class GateError(RuntimeError):
    """The driver cannot hold a stream on host memory here."""


class StreamGate:
    """Hold ``stream`` (a ``torch.cuda.Stream``) with :meth:`hold`, let it go with
    :meth:`release`; a watchdog lets every hold go after ``watchdog_s`` (None: only
    :meth:`release` does, for a gate whose holder never waits on the device meanwhile)."""

    def __init__(self, torch: Any, stream: Any, watchdog_s: float | None = WATCHDOG_S) -> None:
        lib = ctypes.CDLL("libcuda.so.1")
        try:
            self._wait = stream_memop(lib, "cuStreamWaitValue32")
        except AttributeError as exc:
            raise GateError("the driver has no cuStreamWaitValue32") from exc
        self._word = torch.zeros(1, dtype=torch.int32, pin_memory=True)  # kept alive here
        host = self._word.data_ptr()
        device = ctypes.c_uint64()
        get_pointer = getattr(lib, "cuMemHostGetDevicePointer_v2", None)
        if get_pointer is None or get_pointer(ctypes.byref(device), ctypes.c_void_p(host), 0):
            device.value = host  # unified addressing: the host pointer is the device's
        self._device_ptr = int(device.value)
        self._value = ctypes.c_uint32.from_address(host)
        self._stream = ctypes.c_void_p(stream.cuda_stream)
        self._count = 0
        self._watchdog_s = watchdog_s
        self._watch: queue.SimpleQueue[tuple[int, float]] = queue.SimpleQueue()
        if watchdog_s is not None:
            threading.Thread(target=self._watchdog, name="kes-stream-gate", daemon=True).start()

    def hold(self) -> None:
        """The stream waits, from here, until :meth:`release` (or the watchdog)."""
        self._count += 1
        status = self._wait(self._stream, self._device_ptr, self._count, WAIT_GEQ)
        if status != 0:
            self._value.value = self._count
            raise GateError(f"cuStreamWaitValue32 failed (CUDA error {status})")
        if self._watchdog_s is not None:
            self._watch.put((self._count, time.monotonic() + self._watchdog_s))

    def release(self) -> None:
        self._value.value = self._count

    def _watchdog(self) -> None:
        while True:
            count, due = self._watch.get()
            if self._value.value >= count:
                continue
            time.sleep(max(0.0, due - time.monotonic()))
            self._value.value = max(self._value.value, count)


def open_gate(torch: Any, stream: Any) -> StreamGate | None:
    """A gate on ``stream`` that was seen to hold and release it, or None where the driver
    cannot (the timer then leads with a GPU sleep)."""
    try:
        gate = StreamGate(torch, stream)
        gate.hold()
        start = torch.cuda.Event(enable_timing=True)
        start.record(stream)
        gate.release()
        torch.cuda.synchronize()
    except (OSError, GateError, RuntimeError):
        return None
    return gate
