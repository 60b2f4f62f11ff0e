"""Tensors between worker processes: a sealed memory file and a JSON description.

The reference's worker exports each trial's inputs (and, for reuse, its outputs) this way; the
custom kernel's worker exports its outputs and its inputs as they were after its call. A file
is written once, then sealed (``F_SEAL_WRITE``), so the process that receives it can read it
but never change what its sender will later compare against. Values are JSON-described
(:func:`describe`): tensors by dtype, shape and byte range; Python scalars, strings, None and
nested lists/tuples as themselves. Nothing here unpickles: a description is data.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import warnings
from typing import Any

import torch

ALIGN = 64
_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64,
    torch.complex128, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
)}
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE


class TransferError(ValueError):
    """A value cannot cross between processes, or a description does not fit its file."""


def export(values: list[Any]) -> tuple[list[Any], list[dict[str, Any]], int]:
    """(description of ``values``, tensor layout, sealed memfd) for :func:`load`."""
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
        size += (nbytes + ALIGN - 1) // ALIGN * ALIGN
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
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
    except BaseException:
        os.close(fd)
        raise
    return description, layout, fd


def load(description: list[Any], layout: list[dict[str, Any]], fd: int, device: str,
         expect_sealed: bool = True) -> list[Any]:
    """The values :func:`export` described, tensors copied onto ``device``."""
    if expect_sealed and fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_WRITE == 0:
        raise TransferError("the tensor file is not sealed")
    tensors = [read_tensor(fd, entry, device) for entry in layout]
    return [_rebuild(v, tensors) for v in description]


def read_tensor(fd: int, entry: dict[str, Any], device: str) -> torch.Tensor:
    dtype = _DTYPES.get(str(entry.get("dtype")))
    if dtype is None:
        raise TransferError(f"unknown dtype {entry.get('dtype')!r}")
    shape = [int(s) for s in entry["shape"]]
    nbytes, offset = int(entry["nbytes"]), int(entry["offset"])
    itemsize = torch.empty((), dtype=dtype).element_size()
    numel = 1
    for s in shape:
        numel *= s
    if numel * itemsize != nbytes or offset < 0 or nbytes < 0:
        raise TransferError("a tensor's description does not match its byte count")
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
