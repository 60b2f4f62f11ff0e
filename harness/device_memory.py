"""GPU memory two processes map: CUDA's virtual memory API through the driver (ctypes).

The judge creates a region (``cuMemCreate``), maps it into its own address space and exports
it as a POSIX file descriptor (``cuMemExportToShareableHandle``); the descriptor travels over
a Unix socket like any other, and the kernel's process imports and maps it
(:meth:`Region.attach`). Descriptors cross PID and user namespaces, which CUDA's older
``cudaIpc`` handles do not. torch sees a mapping through ``__cuda_array_interface__``.

The memory lives as long as any process holds a descriptor or a mapping of it. Memory made
here is outside torch's allocator: results report it as ``peak_shared_bytes``.
"""

from __future__ import annotations

import ctypes
import os
from contextlib import suppress
from typing import Any

import torch

from shared.protocol import Resources

_POSIX_FD = 1            # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_PINNED = 1              # CU_MEM_ALLOCATION_TYPE_PINNED
_ON_DEVICE = 1           # CU_MEM_LOCATION_TYPE_DEVICE
_READ_WRITE = 3          # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
_RECOMMENDED = 1         # CU_MEM_ALLOC_GRANULARITY_RECOMMENDED

# The largest region this process has mapped (outside torch's allocator).
peak_bytes = 0


class DeviceMemoryError(RuntimeError):
    """GPU memory could not be created, exported, imported or mapped."""


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
        raise DeviceMemoryError(f"{what}: CUDA error {status} ({message})")


def _prop(device: int) -> _AllocationProp:
    prop = _AllocationProp()
    prop.type = _PINNED
    prop.requestedHandleTypes = _POSIX_FD
    prop.location = _Location(_ON_DEVICE, device)
    return prop


def _index(device: torch.device) -> int:
    """The device's index, CUDA initialised in this process (the driver calls need it)."""
    torch.cuda.init()
    return device.index if device.index is not None else torch.cuda.current_device()


def _rounded(nbytes: int, device: int) -> int:
    granularity = ctypes.c_size_t()
    prop = _prop(device)
    _check(_cuda().cuMemGetAllocationGranularity(ctypes.byref(granularity), ctypes.byref(prop),
                                                 _RECOMMENDED), "allocation granularity")
    step = max(int(granularity.value), 1)
    return max(step, (nbytes + step - 1) // step * step)


class Region:
    """``size`` bytes of exportable GPU memory mapped read-write into this process."""

    def __init__(self, handle: int, size: int, device: torch.device, fd: int) -> None:
        global peak_bytes
        lib = _cuda()
        self.handle, self.device, self.fd = handle, device, fd
        self.size = _rounded(size, _index(device))
        ptr = ctypes.c_uint64()
        _check(lib.cuMemAddressReserve(ctypes.byref(ptr), self.size, 0, 0, 0),
               "reserving addresses")
        self.ptr = int(ptr.value)
        try:
            _check(lib.cuMemMap(self.ptr, self.size, 0, handle, 0), "mapping shared memory")
            try:
                access = _AccessDesc(_Location(_ON_DEVICE, _index(device)), _READ_WRITE)
                _check(lib.cuMemSetAccess(self.ptr, self.size, ctypes.byref(access), 1),
                       "granting access to shared memory")
            except BaseException:
                lib.cuMemUnmap(self.ptr, self.size)
                raise
        except BaseException:
            lib.cuMemAddressFree(self.ptr, self.size)
            self.ptr = 0
            raise
        peak_bytes = max(peak_bytes, self.size)

    @classmethod
    def create(cls, size: int, device: torch.device) -> Region:
        """New memory, mapped here, with a descriptor (``fd``) to hand to another process."""
        lib = _cuda()
        index = _index(device)
        rounded = _rounded(size, index)
        handle = ctypes.c_uint64()
        _check(lib.cuMemCreate(ctypes.byref(handle), rounded, ctypes.byref(_prop(index)), 0),
               f"allocating {size} bytes of GPU memory to share")
        try:
            fd = ctypes.c_int(-1)
            _check(lib.cuMemExportToShareableHandle(ctypes.byref(fd), int(handle.value),
                                                    _POSIX_FD, 0),
                   "exporting shared GPU memory")
            try:
                return cls(int(handle.value), size, device, int(fd.value))
            except BaseException:
                os.close(int(fd.value))
                raise
        except BaseException:
            lib.cuMemRelease(int(handle.value))
            raise

    @classmethod
    def attach(cls, fd: int, size: int, device: torch.device) -> Region:
        """Map memory another process exported as ``fd`` (the caller closes ``fd``)."""
        lib = _cuda()
        _index(device)
        handle = ctypes.c_uint64()
        _check(lib.cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd),
                                                  _POSIX_FD), "importing shared GPU memory")
        try:
            return cls(int(handle.value), size, device, -1)
        except BaseException:
            lib.cuMemRelease(int(handle.value))
            raise

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": (self.size,), "typestr": "|u1", "data": (self.ptr, False),
                "version": 3, "strides": None, "stream": None}

    def bytes(self) -> torch.Tensor:
        return torch.as_tensor(self, device=self.device)

    def close(self) -> None:
        if not self.ptr:
            return
        lib = _cuda()
        with suppress(Exception):
            torch.cuda.synchronize(self.device)
        lib.cuMemUnmap(self.ptr, self.size)
        lib.cuMemAddressFree(self.ptr, self.size)
        lib.cuMemRelease(self.handle)
        self.ptr = 0


def available(device: torch.device) -> bool:
    """Whether this process can export GPU memory as a descriptor (driver and device allow it)."""
    try:
        region = Region.create(1, device)
    except (OSError, DeviceMemoryError, AttributeError):
        return False
    os.close(region.fd)
    region.close()
    return True


def resources(device: str) -> Resources:
    """This process's GPU memory: torch's peak, the shared regions' peak, free and total."""
    if device != "cuda":
        return Resources()
    free, total = torch.cuda.mem_get_info()
    return Resources(peak_memory_bytes=int(torch.cuda.max_memory_allocated()),
                     peak_shared_bytes=peak_bytes, device_free_bytes=int(free),
                     device_total_bytes=int(total))
