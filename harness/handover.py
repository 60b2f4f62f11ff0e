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

CPU, words in shared memory that both processes spin on, yielding the core at each turn (a
job process is held to one core, and both may be held to the same one)::

    kernel's process  READY:=n ─ spin until GO>=n ─ the call ─ outputs into the arena ─ DONE:=n
    judge             spin until READY>=n ─ t0 ─ inputs into the arena ─ GO:=n ─
                      spin until DONE>=n ─ outputs into the judge's memory ─ t1

Either way the inputs reach the arena only after the clock started, and the clock stops
only once the outputs are in memory the kernel's process cannot write.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable
from typing import Any

GO, DONE, READY = 0, 128, 256  # byte offsets of the words in the arena
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


class HostWords:
    """The arena's words in host memory both processes map (the CPU's hand-over)."""

    def __init__(self, buffer: Any) -> None:
        self._words = {at: ctypes.c_uint32.from_buffer(buffer, at) for at in (GO, DONE, READY)}
        self._now: Callable[[], float] = time.perf_counter
        self._yield: Callable[[], None] = os.sched_yield

    def set(self, word: int, value: int) -> None:
        self._words[word].value = value

    def get(self, word: int) -> int:
        return int(self._words[word].value)

    def spin_until(self, word: int, value: int, deadline: float) -> bool:
        """Poll ``word`` until it is at least ``value`` (True), or ``deadline`` (a
        ``perf_counter`` time) passed (False); the core is offered to the other process at
        each turn, and taken back at once where it runs on another."""
        cell, now, give = self._words[word], self._now, self._yield
        checks = 0
        while cell.value < value:
            give()
            checks += 1
            if checks % 256 == 0 and now() >= deadline:
                return False
        return True

    def release(self) -> None:
        """Let go of the buffer (the mapping can then be closed)."""
        self._words = {}


class HandOverSide:
    """The kernel's process's part of the hand-over, bound before any user code: on a GPU the
    stream memory operations on its current stream, on the CPU the spin on the arena's words."""

    def __init__(self, device: str) -> None:
        self.device = device
        self._words = DeviceWords() if device == "cuda" else None
        self._host: HostWords | None = None
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
        else:
            self._host = arena.host_words()

    def detach(self) -> None:
        self._host, self._go, self._done = None, 0, 0

    def wait_for_inputs(self, seq: int) -> None:
        """What follows waits for the judge's signal that call ``seq``'s inputs are in (GPU:
        the stream does; CPU: this process, spinning)."""
        if self._host is None:
            assert self._words is not None and self._go, "no arena in GPU memory is mapped"
            self._words.wait(self._stream, self._go, seq)
            return
        self._host.set(READY, seq)
        if not self._host.spin_until(GO, seq, time.perf_counter() + INPUTS_WAIT_S):
            raise HandoverError("the judge never handed the call's inputs over")

    def signal_done(self, seq: int) -> None:
        """Signal the judge that call ``seq``'s outputs are in the arena (GPU: once the stream
        has run everything enqueued before)."""
        if self._host is not None:
            self._host.set(DONE, seq)
            return
        if self._words is not None and self._done:
            try:
                self._words.write(self._stream, self._done, seq)
            except HandoverError:  # a context broken by the call: the judge unsticks itself
                pass


INPUTS_WAIT_S = 30.0
