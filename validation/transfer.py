"""Tensors between worker processes: a sealed memory file and a JSON description.

The reference's worker exports each trial's inputs (and, for reuse, its outputs) this way; the
custom kernel's worker exports its outputs and its inputs as they were after its call. A file
is written once, then sealed (``F_SEAL_WRITE``), so the process that receives it can read it
but never change what its sender will later compare against. Values are JSON-described
(:func:`describe`): tensors by dtype, shape and byte range; Python scalars, strings, None and
nested lists/tuples as themselves. Nothing here unpickles: a description is data.

Tensors already on a GPU can cross without leaving it (``on_device``): the file is then GPU
memory exported by CUDA (:mod:`validation.device_share`), each layout entry says
``"where": "device"``, and the receiver copies the bytes device to device. Such memory is
not sealed; it is a copy made for the receiver, which copies it again before using it, so
what the sender does with it afterwards reaches nothing the receiver compares.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import warnings
from typing import Any

import torch

from shared.memfd import seal

ALIGN = 64
_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64,
    torch.complex128, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
)}
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


class TransferError(ValueError):
    """A value cannot cross between processes, or a description does not fit its file."""


# The largest GPU export this process has made (its memory is outside torch's allocator).
peak_device_export_bytes = 0
_device_share_ok: dict[str, bool] = {}


def export(values: list[Any], on_device: bool = False
           ) -> tuple[list[Any], list[dict[str, Any]], int]:
    """(description of ``values``, tensor layout, file) for :func:`load`.

    The file is a sealed memfd; with ``on_device``, when every tensor is on one GPU and the
    driver can share its memory, a descriptor of GPU memory instead.
    """
    tensors: list[torch.Tensor] = []
    description = [_describe(v, tensors) for v in values]
    layout: list[dict[str, Any]] = []
    size = 0
    for t in tensors:
        dtype = str(t.dtype).removeprefix("torch.")
        if dtype not in _DTYPES:
            raise TransferError(f"tensors of dtype {dtype} cannot be compared across processes")
        nbytes = t.numel() * t.element_size()
        layout.append({"dtype": dtype, "shape": list(t.shape), "offset": size, "nbytes": nbytes})
        size += _aligned(nbytes)
    if on_device and _can_share(tensors):
        return description, layout, _export_on_device(tensors, layout, size)
    fd = os.memfd_create("kes-tensors", os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, max(size, 1))
        # Pages faulted in by the kernel at once: a first touch page by page costs more than
        # the copy for inputs of gigabytes.
        with mmap.mmap(fd, max(size, 1), flags=mmap.MAP_SHARED | _POPULATE) as m:
            for t, entry in zip(tensors, layout):
                if entry["nbytes"]:
                    dest = torch.frombuffer(m, dtype=torch.uint8, count=int(entry["nbytes"]),
                                            offset=int(entry["offset"]))
                    dest.copy_(_bytes_of(t))
                    del dest
        seal(fd)
    except BaseException:
        os.close(fd)
        raise
    return description, layout, fd


def load(description: list[Any], layout: list[dict[str, Any]], fd: int, device: str,
         expect_sealed: bool = True) -> list[Any]:
    """The values :func:`export` described, tensors copied onto ``device``."""
    tensors = load_tensors(fd, layout, device, expect_sealed)
    return [_rebuild(v, tensors) for v in description]


def load_tensors(fd: int, layout: list[dict[str, Any]], device: str,
                 expect_sealed: bool = True) -> list[torch.Tensor]:
    """Every tensor of ``layout``, copied out of ``fd`` onto ``device``."""
    try:
        if on_device(layout):
            return _import_from_device(fd, layout, device)
        if expect_sealed and fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_WRITE == 0:
            raise TransferError("the tensor file is not sealed")
        return [read_tensor(fd, entry, device) for entry in layout]
    except torch.OutOfMemoryError as exc:
        need = sum(int(e.get("nbytes", 0)) for e in layout)
        raise TransferError(f"{need} bytes of tensors do not fit on the device: "
                            f"{str(exc).splitlines()[0]}") from exc


def on_device(layout: list[dict[str, Any]]) -> bool:
    """Whether ``layout`` describes GPU memory (else a memory file)."""
    places = {entry.get("where", "host") for entry in layout}
    if len(places) > 1 or not places <= {"host", "device"}:
        raise TransferError("a tensor layout mixes or names unknown places")
    return places == {"device"}


def _entry(entry: dict[str, Any]) -> tuple[torch.dtype, list[int], int, int]:
    """(dtype, shape, byte count, offset) of one layout entry, checked against each other."""
    dtype = _DTYPES.get(str(entry.get("dtype")))
    if dtype is None:
        raise TransferError(f"unknown dtype {entry.get('dtype')!r}")
    shape = [int(s) for s in entry["shape"]]
    nbytes, offset = int(entry["nbytes"]), int(entry["offset"])
    itemsize = torch.empty((), dtype=dtype).element_size()
    numel = 1
    for s in shape:
        numel *= s
    if numel * itemsize != nbytes or offset < 0 or nbytes < 0 or min(shape, default=0) < 0:
        raise TransferError("a tensor's description does not match its byte count")
    return dtype, shape, nbytes, offset


def read_tensor(fd: int, entry: dict[str, Any], device: str) -> torch.Tensor:
    dtype, shape, nbytes, offset = _entry(entry)
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype, device=device)
    size = os.fstat(fd).st_size
    if offset + nbytes > size:
        raise TransferError("a tensor's bytes lie outside its file")
    with mmap.mmap(fd, size, flags=mmap.MAP_SHARED | _POPULATE, prot=mmap.PROT_READ) as m, \
            warnings.catch_warnings():
        # The mapping is read-only on purpose and only ever copied from: torch's warning that
        # the tensor could write to it does not apply (it would land in the job's log).
        warnings.simplefilter("ignore", UserWarning)
        raw = torch.frombuffer(memoryview(m)[offset:offset + nbytes], dtype=torch.uint8)
        out = torch.empty(nbytes, dtype=torch.uint8, device=device)
        out.copy_(raw)
        del raw
    return out.view(dtype).reshape(shape)


def _aligned(nbytes: int) -> int:
    return (nbytes + ALIGN - 1) // ALIGN * ALIGN


def _can_share(tensors: list[torch.Tensor]) -> bool:
    if not tensors or any(not t.is_cuda or t.device != tensors[0].device for t in tensors):
        return False
    key = str(tensors[0].device)
    if key not in _device_share_ok:
        from validation import device_share

        _device_share_ok[key] = device_share.available(tensors[0].device)
    return _device_share_ok[key]


def _export_on_device(tensors: list[torch.Tensor], layout: list[dict[str, Any]],
                      size: int) -> int:
    from validation import device_share

    global peak_device_export_bytes
    chunks = [(int(e["offset"]), _bytes_of(t)) for t, e in zip(tensors, layout) if e["nbytes"]]
    try:
        fd = device_share.export_bytes(chunks, max(size, 1), tensors[0].device)
    except device_share.DeviceShareError as exc:
        free, total = torch.cuda.mem_get_info(tensors[0].device)
        raise TransferError(
            f"the tensors could not be shared on the GPU ({size} bytes; {free} bytes free of "
            f"{total}): {exc}") from exc
    for entry in layout:
        entry["where"] = "device"
    peak_device_export_bytes = max(peak_device_export_bytes, size)
    return fd


def _import_from_device(fd: int, layout: list[dict[str, Any]], device: str) -> list[torch.Tensor]:
    from validation import device_share

    entries = [_entry(e) for e in layout]
    size = max([offset + _aligned(nbytes) for _, _, nbytes, offset in entries], default=0)
    target = torch.device(device)
    if target.type != "cuda":
        raise TransferError("GPU memory was sent to a process without a GPU")
    out: list[torch.Tensor] = []
    try:
        with device_share.Imported(fd, max(size, 1), target) as shared:
            for dtype, shape, nbytes, offset in entries:
                t = torch.empty(nbytes, dtype=torch.uint8, device=target)
                if nbytes:
                    t.copy_(shared.view(offset, nbytes))
                out.append(t.view(dtype).reshape(shape))
    except device_share.DeviceShareError as exc:
        raise TransferError(f"the tensors' GPU memory could not be read: {exc}") from exc
    return out


def total_bytes(layout: list[dict[str, Any]]) -> int:
    return sum(int(e["nbytes"]) for e in layout)


def _bytes_of(t: torch.Tensor) -> torch.Tensor:
    flat = t.detach().contiguous().reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    return flat.view(torch.uint8)


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
    raise TransferError(
        f"an input of type {type(value).__name__} cannot be passed between the reference's and "
        "the kernel's processes (supported: tensors, numbers, strings, None, lists, tuples)"
    )


def _rebuild(spec: Any, tensors: list[torch.Tensor]) -> Any:
    if not isinstance(spec, dict) or len(spec) != 1:
        raise TransferError("a malformed value description")
    (kind, body), = spec.items()
    if kind == "tensor":
        return tensors[int(body)]
    if kind == "value":
        return body
    if kind == "list":
        return [_rebuild(v, tensors) for v in body]
    if kind == "tuple":
        return tuple(_rebuild(v, tensors) for v in body)
    if kind == "dtype":
        dtype = _DTYPES.get(str(body))
        if dtype is None:
            raise TransferError(f"unknown dtype {body!r}")
        return dtype
    raise TransferError(f"unknown value kind {kind!r}")
