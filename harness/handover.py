"""How the judge and the kernel's process hand a timed call over, with no host in between.

A judged sample's clock is the judge's own: two CUDA events on its stream (GPU), or its
``perf_counter`` (CPU). The two processes signal each other through words at the start of
the arena they both map (:data:`harness.arena.CONTROL_BYTES`), numbered by the call's
sequence number ``n``:

GPU, with stream memory operations (``cuStreamWaitValue32`` / ``cuStreamWriteValue32``)::

    judge's stream   [held] T0 ─ inputs into the arena ─ L2 flush ─ GO:=n ─ wait DONE>=n ─
                     outputs into the judge's memory ─ T1
    kernel's stream  wait GO>=n ─ the call ─ its outputs into the arena ─ DONE:=n

  The judge enqueues its part behind a gate on a host word (:mod:`harness.stream_gate`),
  asks for the call, and opens the gate once the kernel's process says its part is enqueued:
  the host round trip and the call's launch fall before T0, and the interval holds only GPU
  work, which runs in the order above whatever either process does on its host.

CPU, where there are no streams, by the pair channel's messages::

    judge             t0 ─ inputs into the arena ─ Call ─ (sleeps) ─ outputs into its memory ─ t1
    kernel's process  (sleeps) ─ Call ─ the call ─ outputs into the arena ─ CallDone

  Both wake-ups fall inside the interval, in the null call's as in a sample's. Neither
  process spins: a job process is held to one core, both may be held to the same one, and a
  spinning judge would take half that core from the call it waits for.

Either way the inputs reach the arena only after the clock started, and the clock stops
only once the outputs are in memory the kernel's process cannot write.
"""

from __future__ import annotations

import ctypes
from typing import Any

GO, DONE = 0, 128  # byte offsets of the words in the arena
WAIT_GEQ = 0x0  # CU_STREAM_WAIT_VALUE_GEQ
WRITE_DEFAULT = 0x0  # CU_STREAM_WRITE_VALUE_DEFAULT: a memory barrier before the write


class HandoverError(RuntimeError):
    """The driver refused a stream memory operation."""


class DeviceWords:
    """Stream memory operations on words of GPU memory, bound when made (before user code)."""

    def __init__(self) -> None:
        lib = ctypes.CDLL("libcuda.so.1")
        self._wait = stream_memop(lib, "cuStreamWaitValue32")
        self._write = stream_memop(lib, "cuStreamWriteValue32")

    def wait(self, stream: int, address: int, value: int) -> None:
        """``stream`` waits, from here, until the word at ``address`` is at least ``value``."""
        status = self._wait(ctypes.c_void_p(stream), address, value, WAIT_GEQ)
        if status != 0:
            raise HandoverError(f"cuStreamWaitValue32 failed (CUDA error {status})")

    def write(self, stream: int, address: int, value: int) -> None:
        """``stream`` writes ``value`` to the word at ``address`` once its work so far is done."""
        status = self._write(ctypes.c_void_p(stream), address, value, WRITE_DEFAULT)
        if status != 0:
            raise HandoverError(f"cuStreamWriteValue32 failed (CUDA error {status})")


def stream_memop(lib: Any, name: str) -> Any:
    """The driver's stream memory operation ``name`` (its ``_v2`` where there is one), typed;
    AttributeError where the driver has neither."""
    fn = getattr(lib, name + "_v2", None) or getattr(lib, name)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


class HandOverSide:
    """The kernel's process's part of the hand-over, bound before any user code: on a GPU the
    stream memory operations on its current stream (on the CPU there is nothing to do: the
    judge's message is the signal)."""

    def __init__(self, device: str) -> None:
        self.device = device
        self._words = DeviceWords() if device == "cuda" else None
        self._stream = 0
        self._go = self._done = 0

    def attach(self, arena: Any, dummy: list[Any]) -> None:
        """Take the words of a newly mapped ``arena``; its null call's copy of ``dummy`` into
        the output slots runs once here, outside any hand-over (a module loaded lazily behind
        the judge's gate would wait for the device, which waits for the gate)."""
        if arena.layout.where == "device":
            import torch

            self._stream = int(torch.cuda.current_stream().cuda_stream)
            self._go, self._done = arena.word_address(GO), arena.word_address(DONE)
            for slot, t in zip(arena.outputs, dummy):
                slot.copy_(t)
            torch.cuda.synchronize()

    def detach(self) -> None:
        self._go, self._done = 0, 0

    def wait_for_inputs(self, seq: int) -> None:
        """What follows waits for the judge's signal that call ``seq``'s inputs are in (GPU:
        the stream does; CPU: they are, the judge's message came after them)."""
        if self._words is not None and self._go:
            self._words.wait(self._stream, self._go, seq)

    def signal_done(self, seq: int) -> None:
        """Signal the judge that call ``seq``'s outputs are in the arena (GPU: once the stream
        has run everything enqueued before; CPU: the answer says so)."""
        if self._words is not None and self._done:
            try:
                self._words.write(self._stream, self._done, seq)
            except HandoverError:  # a context broken by the call: the judge unsticks itself
                pass

