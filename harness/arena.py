"""The memory a judge and its kernel's process both map: inputs in, outputs out.

A comparison hands the kernel each call's inputs and takes its outputs back. Exporting new
memory per trial costs an allocation, a mapping and a copy per direction; an arena is mapped
once per pairing. The judge creates it (:meth:`Arena.create`) with a slot per input tensor
of the reference and per output tensor the reference returns, and sends its descriptor to
the kernel's process, which maps it (:meth:`Arena.attach`) and calls the kernel on tensors
that *are* the input slots: nothing is copied into that process at all, so a problem whose
inputs fit the GPU once beside the judge's own copy fits the comparison.

On a GPU the arena is memory made with CUDA's virtual memory API (:mod:`harness.device_memory`),
exported as a file descriptor (which crosses PID and user namespaces, unlike ``cudaIpc``
handles); on the CPU, or where the driver cannot export memory, a memory file (``memfd``)
both processes map.

Both processes can write all of it, so the judge trusts none of it: it writes a timed call's
inputs after its clock started (never earlier, so nothing can be computed from them before
it runs), reads the outputs into its own memory before the clock stops, and checks the input
slots against its own copy's fingerprints after the call. The first :data:`CONTROL_BYTES`
hold the words the two processes hand a timed call over with (:mod:`harness.handover`).
"""

from __future__ import annotations

import mmap
import os
from contextlib import suppress
from typing import Any

import torch

from shared.protocol import ArenaLayout, Slot

ALIGN = 512
CONTROL_BYTES = 512  # the hand-over's words (harness.handover), before the first slot
FLOAT8 = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz)
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, *FLOAT8, torch.complex64,
    torch.complex128, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
)}


class ArenaError(ValueError):
    """A value cannot cross between the processes, or a layout does not fit its memory."""


class DoesNotFit(ArenaError):
    """The arena's memory could not be had: ``needed`` bytes, ``free`` on the device."""

    def __init__(self, message: str, needed: int, free: int | None) -> None:
        super().__init__(message)
        self.needed = needed
        self.free = free


def aligned(nbytes: int) -> int:
    return (nbytes + ALIGN - 1) // ALIGN * ALIGN


def dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def plan(inputs: list[Any], outputs: list[torch.Tensor], where: str) -> ArenaLayout:
    """The layout of an arena for ``inputs`` (the reference's input values in call order)
    and ``outputs`` (the reference's output tensors)."""
    tensors: list[torch.Tensor] = []
    values = [_describe(v, tensors) for v in inputs]
    offset = CONTROL_BYTES
    slots: list[list[Slot]] = [[], []]
    for group, items in ((0, tensors), (1, outputs)):
        for t in items:
            name = dtype_name(t)
            if name not in DTYPES:
                raise ArenaError(f"tensors of dtype {name} cannot be compared across processes")
            nbytes = t.numel() * t.element_size()
            slots[group].append(Slot(dtype=name, shape=list(t.shape), offset=offset,
                                     nbytes=nbytes))
            offset += aligned(nbytes)
    return ArenaLayout(size=offset, where=where,  # type: ignore[arg-type]
                       inputs=slots[0], outputs=slots[1], values=values)


class Arena:
    """One mapping of an arena in this process; tensors are views of it."""

    def __init__(self, layout: ArenaLayout, device: str, memory: Any, fd: int) -> None:
        self.layout = layout
        self.device = device
        self._memory = memory  # a device_memory.Region, or an mmap
        self._fd = fd  # the judge's descriptor to send (-1 in the kernel's process)
        base = self._bytes()
        self.inputs = [_view(base, s) for s in layout.inputs]
        self.outputs = [_view(base, s) for s in layout.outputs]

    @classmethod
    def create(cls, layout: ArenaLayout, device: str) -> Arena:
        """New memory for ``layout`` (the judge's side); :meth:`share` gives its descriptor."""
        if layout.where == "device":
            from harness import device_memory

            try:
                region = device_memory.Region.create(layout.size, torch.device(device))
            except device_memory.DeviceMemoryError as exc:
                free, total = torch.cuda.mem_get_info()
                raise DoesNotFit(
                    f"the inputs and outputs ({layout.size} bytes) do not fit beside the "
                    f"reference's own copy: {free} bytes of {total} are free on the GPU ({exc})",
                    layout.size, free) from exc
            region.bytes()[:CONTROL_BYTES].zero_()  # (new memory holds whatever was there)
            torch.cuda.synchronize()
            return cls(layout, device, region, region.fd)
        fd = os.memfd_create("kes-arena", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, layout.size)
            memory = mmap.mmap(fd, layout.size, flags=mmap.MAP_SHARED)
        except BaseException:
            os.close(fd)
            raise
        return cls(layout, device, memory, fd)

    @classmethod
    def attach(cls, layout: ArenaLayout, fd: int, device: str) -> Arena:
        """Map the arena the judge sent (the kernel's side); ``fd`` is closed here."""
        try:
            if layout.where == "device":
                from harness import device_memory

                if not device.startswith("cuda"):
                    raise ArenaError("GPU memory was sent to a process without a GPU")
                try:
                    region = device_memory.Region.attach(fd, layout.size, torch.device(device))
                except device_memory.DeviceMemoryError as exc:
                    raise ArenaError(f"the arena's GPU memory could not be mapped: {exc}") \
                        from exc
                return cls(layout, device, region, -1)
            if os.fstat(fd).st_size < layout.size:
                raise ArenaError("the arena's memory file is smaller than its layout")
            return cls(layout, device, mmap.mmap(fd, layout.size, flags=mmap.MAP_SHARED), -1)
        finally:
            with suppress(OSError):
                os.close(fd)

    @staticmethod
    def can_share_device(device: str) -> bool:
        from harness import device_memory

        return device_memory.available(torch.device(device))

    @property
    def fd(self) -> int:
        return self._fd

    def word_address(self, word: int) -> int:
        """The device address, in this process's mapping, of the hand-over's ``word`` (an
        offset of :mod:`harness.handover`; an arena in GPU memory)."""
        assert self.layout.where == "device" and self._memory is not None
        return int(self._memory.ptr) + word

    @property
    def memory(self) -> torch.Tensor:
        """All of the arena's bytes, in this process's mapping."""
        return self._bytes()

    def values(self) -> list[Any]:
        """The reference's input values, rebuilt around the input slots (no copy)."""
        return [_rebuild(v, self.inputs) for v in self.layout.values]

    def _bytes(self) -> torch.Tensor:
        if self.layout.where == "device":
            return self._memory.bytes()
        return torch.frombuffer(self._memory, dtype=torch.uint8, count=self.layout.size)

    def close(self) -> None:
        self.inputs, self.outputs = [], []
        if self._fd >= 0:
            with suppress(OSError):
                os.close(self._fd)
            self._fd = -1
        memory, self._memory = self._memory, None
        if memory is not None:
            with suppress(Exception):  # an mmap still viewed by a tensor: freed with it
                memory.close()


def _view(base: torch.Tensor, slot: Slot) -> torch.Tensor:
    dtype = DTYPES.get(slot.dtype)
    if dtype is None:
        raise ArenaError(f"unknown dtype {slot.dtype!r}")
    itemsize = torch.empty((), dtype=dtype).element_size()
    numel = 1
    for s in slot.shape:
        numel *= s
    if numel * itemsize != slot.nbytes or slot.offset + slot.nbytes > base.numel():
        raise ArenaError("a slot of the arena does not match its byte count")
    raw = base[slot.offset:slot.offset + slot.nbytes]
    if dtype == torch.bool:
        return raw.view(torch.bool).reshape(slot.shape)
    return raw.view(dtype).reshape(slot.shape)


def _describe(value: Any, tensors: list[torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return {"tensor": len(tensors) - 1}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    if isinstance(value, (list, tuple)):
        kind = "list" if isinstance(value, list) else "tuple"
        return {kind: [_describe(v, tensors) for v in value]}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    raise ArenaError(
        f"an input of type {type(value).__name__} cannot be passed between the reference's and "
        "the kernel's processes (supported: tensors, numbers, strings, None, lists, tuples)")


def _rebuild(spec: Any, tensors: list[torch.Tensor]) -> Any:
    if not isinstance(spec, dict) or len(spec) != 1:
        raise ArenaError("a malformed value description")
    (kind, body), = spec.items()
    if kind == "tensor":
        index = int(body)
        if not 0 <= index < len(tensors):
            raise ArenaError("a value description names a tensor the arena does not hold")
        return tensors[index]
    if kind == "value":
        return body
    if kind == "list":
        return [_rebuild(v, tensors) for v in body]
    if kind == "tuple":
        return tuple(_rebuild(v, tensors) for v in body)
    if kind == "dtype":
        dtype = DTYPES.get(str(body))
        if dtype is None:
            raise ArenaError(f"unknown dtype {body!r}")
        return dtype
    raise ArenaError(f"unknown value kind {kind!r}")
