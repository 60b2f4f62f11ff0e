"""Tensor bookkeeping both kinds of job process share: fingerprints, sizes, descriptions."""

from __future__ import annotations

from typing import Any

import torch

from shared.protocol import TensorMeta

FINGERPRINT_CHUNK = 1 << 24


def fingerprint(t: torch.Tensor) -> list[int]:
    """Two integer sums over a tensor's bytes, on its device (equal bytes, equal prints).

    Tells whether a call changed a tensor without moving it off the device: the plain sum and
    a position-weighted sum of its 32-bit words (bytes when the size is not a multiple of 4),
    accumulated in int64 with wrap-around, and the word count.
    """
    flat = t.detach().contiguous().reshape(-1)
    raw = flat.view(torch.uint8)
    words = raw.view(torch.int32) if raw.numel() % 4 == 0 else raw
    total, weighted = 0, 0
    for lo in range(0, words.numel(), FINGERPRINT_CHUNK):
        chunk = words[lo:lo + FINGERPRINT_CHUNK].to(torch.int64)
        weights = torch.arange(lo + 1, lo + chunk.numel() + 1, dtype=torch.int64,
                               device=chunk.device)
        total += int(chunk.sum().item())
        weighted += int((chunk * weights).sum().item())
    return [total & 0xFFFFFFFFFFFFFFFF, weighted & 0xFFFFFFFFFFFFFFFF, int(words.numel())]


def tensors_of(values: list[Any]) -> list[torch.Tensor]:
    """Every tensor of ``values`` in order, nested lists and tuples included."""
    out: list[torch.Tensor] = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend(tensors_of(list(v)))
    return out


def tensor_bytes(values: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors_of(list(values)))


def meta(t: torch.Tensor) -> TensorMeta:
    return TensorMeta(dtype=str(t.dtype).removeprefix("torch."), shape=list(t.shape))


def describe(m: TensorMeta) -> str:
    return f"{m.dtype}{m.shape}"


def check_plain(outputs: list[Any]) -> None:
    """Outputs must be plain tensors: a subclass could compute lazily or lie when compared."""
    for t in outputs:
        if type(t) not in (torch.Tensor, torch.nn.Parameter):
            raise TypeError(f"the kernel returned a {type(t).__module__}.{type(t).__name__}; "
                            "outputs must be plain torch.Tensor objects")
