"""GPU memory one process hands another as a file descriptor: CUDA's virtual memory API.

A comparison moves each trial's inputs from the reference's process to the kernel's, and the
kernel's outputs to the checker. Through host memory that is four PCIe crossings per trial,
seconds for the gigabytes of a real KernelBench problem. Here the sender copies the bytes
into an allocation made with ``cuMemCreate`` for export, exports it as a POSIX file
descriptor (``cuMemExportToShareableHandle``) and sends that over the worker's Unix socket
like any other; the receiver imports it, maps it and copies the bytes into memory of its own.
Nothing crosses the bus, and descriptors pass between PID and user namespaces, which CUDA's
older ``cudaIpc`` handles do not.

Only libcuda (the driver, loaded by ctypes) is used; torch sees the memory through
``__cuda_array_interface__``. The allocation lives as long as any process holds its
descriptor or a mapping of it: the sender releases its own as soon as the descriptor is made.
A receiver keeps its mapping only while it copies (:class:`Imported`), so what the sender (or, for the
kernel's outputs, the kernel) does with the memory afterwards cannot reach it.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import torch

_POSIX_FD = 1            # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_PINNED = 1              # CU_MEM_ALLOCATION_TYPE_PINNED
_ON_DEVICE = 1           # CU_MEM_LOCATION_TYPE_DEVICE
_READ_WRITE = 3          # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
_RECOMMENDED = 1         # CU_MEM_ALLOC_GRANULARITY_RECOMMENDED


class DeviceShareError(RuntimeError):
    """GPU memory could not be exported or imported."""


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", _Location), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_driver: Any = None


def _cuda() -> Any:
    global _driver
    if _driver is None:
        lib = ctypes.CDLL("libcuda.so.1")
        u64, size_t = ctypes.c_uint64, ctypes.c_size_t
        lib.cuMemGetAllocationGranularity.argtypes = [
            ctypes.POINTER(size_t), ctypes.POINTER(_AllocationProp), ctypes.c_int]
        lib.cuMemCreate.argtypes = [ctypes.POINTER(u64), size_t,
                                    ctypes.POINTER(_AllocationProp), u64]
        lib.cuMemExportToShareableHandle.argtypes = [ctypes.c_void_p, u64, ctypes.c_int, u64]
        lib.cuMemImportFromShareableHandle.argtypes = [ctypes.POINTER(u64), ctypes.c_void_p,
                                                       ctypes.c_int]
        lib.cuMemAddressReserve.argtypes = [ctypes.POINTER(u64), size_t, size_t, u64, u64]
        lib.cuMemMap.argtypes = [u64, size_t, size_t, u64, u64]
        lib.cuMemSetAccess.argtypes = [u64, size_t, ctypes.POINTER(_AccessDesc), size_t]
        lib.cuMemUnmap.argtypes = [u64, size_t]
        lib.cuMemAddressFree.argtypes = [u64, size_t]
        lib.cuMemRelease.argtypes = [u64]
        lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        _driver = lib
    return _driver


def _check(status: int, what: str) -> None:
    if status != 0:
        text = ctypes.c_char_p()
        _cuda().cuGetErrorString(status, ctypes.byref(text))
        message = text.value.decode() if text.value else "unknown error"
        raise DeviceShareError(f"{what}: CUDA error {status} ({message})")


def _prop(device: int) -> _AllocationProp:
    prop = _AllocationProp()
    prop.type = _PINNED
    prop.requestedHandleTypes = _POSIX_FD
    prop.location = _Location(_ON_DEVICE, device)
    return prop


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _rounded(nbytes: int, device: int) -> int:
    granularity = ctypes.c_size_t()
    prop = _prop(device)
    _check(_cuda().cuMemGetAllocationGranularity(ctypes.byref(granularity), ctypes.byref(prop),
                                                 _RECOMMENDED), "allocation granularity")
    step = max(int(granularity.value), 1)
    return max(step, (nbytes + step - 1) // step * step)


class _Mapping:
    """``size`` bytes of ``handle`` mapped read-write into this process at ``ptr``."""

    def __init__(self, handle: int, size: int, device: int) -> None:
        lib = _cuda()
        self.handle, self.size, self.ptr = handle, size, 0
        ptr = ctypes.c_uint64()
        _check(lib.cuMemAddressReserve(ctypes.byref(ptr), size, 0, 0, 0), "reserving addresses")
        self.ptr = int(ptr.value)
        try:
            _check(lib.cuMemMap(self.ptr, size, 0, handle, 0), "mapping shared memory")
            try:
                access = _AccessDesc(_Location(_ON_DEVICE, device), _READ_WRITE)
                _check(lib.cuMemSetAccess(self.ptr, size, ctypes.byref(access), 1),
                       "granting access to shared memory")
            except BaseException:
                lib.cuMemUnmap(self.ptr, size)
                raise
        except BaseException:
            lib.cuMemAddressFree(self.ptr, size)
            self.ptr = 0
            raise

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": (self.size,), "typestr": "|u1", "data": (self.ptr, False),
                "version": 3, "strides": None, "stream": None}

    def bytes(self, device: torch.device) -> torch.Tensor:
        return torch.as_tensor(self, device=device)

    def close(self) -> None:
        if self.ptr:
            lib = _cuda()
            lib.cuMemUnmap(self.ptr, self.size)
            lib.cuMemAddressFree(self.ptr, self.size)
            self.ptr = 0


def export_bytes(chunks: list[tuple[int, torch.Tensor]], size: int, device: torch.device) -> int:
    """A descriptor of new GPU memory of ``size`` bytes holding each uint8 ``chunk`` at its
    offset. The caller owns the descriptor; this process keeps no reference to the memory."""
    lib = _cuda()
    index = _index(device)
    rounded = _rounded(size, index)
    handle = ctypes.c_uint64()
    _check(lib.cuMemCreate(ctypes.byref(handle), rounded, ctypes.byref(_prop(index)), 0),
           f"allocating {size} bytes of GPU memory to share")
    try:
        mapping = _Mapping(int(handle.value), rounded, index)
        try:
            target = mapping.bytes(device)
            for offset, chunk in chunks:
                if chunk.numel():
                    target[offset:offset + chunk.numel()].copy_(chunk)
            torch.cuda.synchronize(device)
            del target
        finally:
            mapping.close()
        fd = ctypes.c_int(-1)
        _check(lib.cuMemExportToShareableHandle(ctypes.byref(fd), int(handle.value), _POSIX_FD, 0),
               "exporting shared GPU memory")
        return int(fd.value)
    finally:
        lib.cuMemRelease(int(handle.value))


class Imported:
    """GPU memory another process exported: :meth:`view` its bytes, then :meth:`close`."""

    def __init__(self, fd: int, size: int, device: torch.device) -> None:
        lib = _cuda()
        self.device = device
        index = _index(device)
        handle = ctypes.c_uint64()
        _check(lib.cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd),
                                                  _POSIX_FD), "importing shared GPU memory")
        self.handle = int(handle.value)
        try:
            self.mapping = _Mapping(self.handle, _rounded(size, index), index)
        except BaseException:
            lib.cuMemRelease(self.handle)
            raise

    def view(self, offset: int, nbytes: int) -> torch.Tensor:
        return self.mapping.bytes(self.device)[offset:offset + nbytes]

    def close(self) -> None:
        torch.cuda.synchronize(self.device)
        self.mapping.close()
        _cuda().cuMemRelease(self.handle)

    def __enter__(self) -> Imported:  # noqa: PYI034 - final class
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def available(device: torch.device) -> bool:
    """Whether this process can export GPU memory as a descriptor (driver and device allow it)."""
    try:
        fd = export_bytes([], 1, device)
    except (OSError, DeviceShareError, AttributeError):
        return False
    os.close(fd)
    return True
