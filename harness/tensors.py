"""Tensor bookkeeping both kinds of job process share: fingerprints, sizes, descriptions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import torch

from shared.protocol import TensorMeta

FINGERPRINT_CHUNK = 1 << 24
T = TypeVar("T")


def fingerprint(t: torch.Tensor) -> list[int]:
    """Two integer sums over a tensor's bytes, on its device (equal bytes, equal prints).

    Tells whether a call changed a tensor without moving it off the device: the plain sum and
    a position-weighted sum of its 32-bit words (bytes when the size is not a multiple of 4),
    accumulated in int64 with wrap-around, and the word count.
    """
    return fingerprints([t])[0]


def fingerprints(tensors: Sequence[torch.Tensor]) -> list[list[int]]:
    """:func:`fingerprint` of each of ``tensors``, read back with one wait per device, not two
    per tensor: each wait for the GPU may wait out other contexts' time slices besides."""
    return resolve(stage_fingerprints(tensors))[0]


class Staged(Generic[T]):
    """A result computed on the device as 0-d tensors (``scalars``), finished on the host from
    their values (``finish``); several are read back together by :func:`resolve`."""

    def __init__(self, scalars: list[torch.Tensor], finish: Callable[[list[Any]], T]) -> None:
        self.scalars, self.finish = scalars, finish

    @staticmethod
    def known(value: T) -> Staged[T]:
        """A result known without reading the device."""
        return Staged([], lambda _: value)


def first_of(parts: Sequence[tuple[str, Staged[str | None]]]) -> Staged[str | None]:
    """The first of ``parts``' answers that is not None (a problem found), after its prefix;
    None when none is: checks staged in order, read back together."""

    def finish(values: list[Any]) -> str | None:
        at = 0
        for prefix, part in parts:
            answer = part.finish(values[at:at + len(part.scalars)])
            at += len(part.scalars)
            if answer is not None:
                return f"{prefix}{answer}"
        return None

    return Staged([s for _, part in parts for s in part.scalars], finish)


def resolve(*staged: Staged[Any]) -> list[Any]:
    """Each of ``staged``'s results, from one read of all their scalars (one wait for the
    device, where each read alone would wait once)."""
    values = read_back([s for one in staged for s in one.scalars])
    out, at = [], 0
    for one in staged:
        out.append(one.finish(values[at:at + len(one.scalars)]))
        at += len(one.scalars)
    return out


def stage_fingerprints(tensors: Sequence[torch.Tensor]) -> Staged[list[list[int]]]:
    """:func:`fingerprints`, staged (for :func:`resolve`)."""
    sums: list[torch.Tensor] = []  # per chunk of each tensor: its sum, its weighted sum
    shapes: list[tuple[int, int]] = []  # per tensor: (chunks, words)
    for t in tensors:
        flat = t.detach().contiguous().reshape(-1)
        raw = flat.view(torch.uint8)
        words = raw.view(torch.int32) if raw.numel() % 4 == 0 else raw
        chunks = 0
        for lo in range(0, words.numel(), FINGERPRINT_CHUNK):
            chunk = words[lo:lo + FINGERPRINT_CHUNK].to(torch.int64)
            total = chunk.sum()
            # sum((lo + k) * w_k) = sum(k * w_k) + lo * sum(w_k), k from 1, all mod 2^64
            weighted = (chunk * _weights(chunk.numel(), chunk.device)).sum()
            sums += [total, weighted + lo * total if lo else weighted]
            chunks += 1
        shapes.append((chunks, int(words.numel())))

    def finish(values: list[Any]) -> list[list[int]]:
        prints, at = [], 0
        for chunks, words_count in shapes:
            mine = values[at:at + 2 * chunks]
            at += 2 * chunks
            prints.append([int(sum(mine[0::2])) & 0xFFFFFFFFFFFFFFFF,
                           int(sum(mine[1::2])) & 0xFFFFFFFFFFFFFFFF, words_count])
        return prints

    return Staged(sums, finish)


# The position weights 1..n of a fingerprint, kept per device up to this many words (8 MB of
# int64): a small tensor's fingerprint then makes no weights of its own.
WEIGHTS_KEPT = 1 << 20
_kept_weights: dict[torch.device, torch.Tensor] = {}


def _weights(n: int, device: torch.device) -> torch.Tensor:
    """1, 2, ..., ``n`` as int64 on ``device``."""
    if n > WEIGHTS_KEPT:
        return torch.arange(1, n + 1, dtype=torch.int64, device=device)
    kept = _kept_weights.get(device)
    if kept is None or kept.numel() < n:
        kept = torch.arange(1, max(n, 1 << 12) + 1, dtype=torch.int64, device=device)
        _kept_weights[device] = kept
    return kept[:n]


def read_back(scalars: Sequence[torch.Tensor]) -> list[Any]:
    """The values of 0-d tensors ``scalars`` as Python numbers, in order: one copy (and one
    wait) per device and dtype among them, where ``.item()`` on each would wait once per
    scalar."""
    places: dict[tuple[torch.device, torch.dtype], list[int]] = {}
    for i, s in enumerate(scalars):
        places.setdefault((s.device, s.dtype), []).append(i)
    out: list[Any] = [None] * len(scalars)
    for where in places.values():
        for i, value in zip(where, torch.stack([scalars[i] for i in where]).tolist()):
            out[i] = value
    return out


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
