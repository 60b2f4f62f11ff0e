"""Fingerprints of tensors read back together: the same prints as one tensor at a time, with
one wait for the device per batch (``read_back``), not two per tensor."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from harness import tensors
from harness.tensors import fingerprint, fingerprints, read_back


def print_by_hand(t: torch.Tensor) -> list[int]:
    """The fingerprint's definition, word by word in Python."""
    raw = bytes(t.contiguous().reshape(-1).view(torch.uint8).tolist())
    if len(raw) % 4 == 0:
        words = [int.from_bytes(raw[i:i + 4], "little", signed=True)
                 for i in range(0, len(raw), 4)]
    else:
        words = list(raw)
    total = sum(words)
    weighted = sum((i + 1) * w for i, w in enumerate(words))
    return [total & 0xFFFFFFFFFFFFFFFF, weighted & 0xFFFFFFFFFFFFFFFF, len(words)]


SAMPLES = [torch.randn(37), torch.arange(-5, 6, dtype=torch.int64),
           torch.ones(5, dtype=torch.float16), torch.zeros(0), torch.randn(3, 4).t()]


def test_a_batch_of_prints_matches_the_definition_for_each_tensor() -> None:
    assert fingerprints(SAMPLES) == [print_by_hand(t) for t in SAMPLES]
    assert [fingerprint(t) for t in SAMPLES] == [print_by_hand(t) for t in SAMPLES]


def test_a_tensor_of_several_chunks_prints_as_one(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.randn(1000)
    whole = fingerprint(x)
    monkeypatch.setattr(tensors, "FINGERPRINT_CHUNK", 64)
    assert fingerprints([x, x[:3]]) == [whole, print_by_hand(x[:3])]


@pytest.mark.parametrize("kept", [8, 5000, 1 << 20])
def test_prints_match_the_definition_whether_the_weights_are_kept_made_or_grown(
        monkeypatch: pytest.MonkeyPatch, kept: int) -> None:
    # weights kept shorter than a chunk (made for it), longer (sliced), and grown on demand
    monkeypatch.setattr(tensors, "WEIGHTS_KEPT", kept)
    monkeypatch.setattr(tensors, "_kept_weights", {})
    monkeypatch.setattr(tensors, "FINGERPRINT_CHUNK", 3000)
    small, large = torch.randn(37), torch.randint(-2**31, 2**31 - 1, (7001,), dtype=torch.int32)
    assert fingerprints([small, large, small]) == [print_by_hand(t) for t in (small, large, small)]


def test_a_changed_byte_changes_the_print() -> None:
    x = torch.randn(64)
    y = x.clone()
    y.view(torch.uint8)[17] ^= 1
    assert fingerprints([x])[0] != fingerprints([y])[0]


def test_a_batch_of_prints_is_read_back_once(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []
    tolist = torch.Tensor.tolist

    def counted_tolist(self: torch.Tensor) -> Any:
        reads.append(self.numel())
        return tolist(self)

    def no_item(self: torch.Tensor) -> Any:
        raise AssertionError("a fingerprint read a scalar on its own")

    monkeypatch.setattr(torch.Tensor, "tolist", counted_tolist)
    monkeypatch.setattr(torch.Tensor, "item", no_item)
    fingerprints(SAMPLES)
    assert reads == [2 * 4]  # two sums for each non-empty tensor, in one read


def test_read_back_keeps_order_and_exact_integers_across_dtypes() -> None:
    values = read_back([torch.tensor(2**62 + 1), torch.tensor(0.25, dtype=torch.float64),
                        torch.tensor(-3)])
    assert values == [2**62 + 1, 0.25, -3]
    assert isinstance(values[0], int) and isinstance(values[1], float)


def test_prints_and_comparisons_resolved_together_read_back_once_and_agree(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from validation.compare import compare_tensor, stage_outputs

    want = torch.linspace(-2, 2, 300)
    wrong = want.clone()
    wrong[7] += 1
    expected = ([print_by_hand(t) for t in SAMPLES],
                compare_tensor(want.clone(), want, None, None),
                compare_tensor(wrong, want, None, None))
    reads: list[int] = []
    real = tensors.read_back

    def counted(scalars: Any) -> list[Any]:
        reads.append(len(scalars))
        return real(scalars)

    monkeypatch.setattr(tensors, "read_back", counted)
    got = tensors.resolve(tensors.stage_fingerprints(SAMPLES),
                          stage_outputs([want.clone()], [want], None, None),
                          stage_outputs([wrong], [want], None, None))
    assert len(reads) == 1
    assert got[0] == expected[0] and got[1] is None is expected[1]
    assert got[2] is not None and got[2] == f"output: {expected[2]}"
