"""The timed-sample audit (profiling.timer.SampleAudit): which sample it keeps, and what."""

from __future__ import annotations

from collections import Counter

import torch

from profiling import timer


def as_list(result: object) -> list[object]:
    return [result]


def test_the_kept_outputs_are_a_copy_taken_when_the_sample_ran_not_the_reused_buffer() -> None:
    buffer = torch.zeros(4)
    calls = {"n": 0}

    def kernel() -> torch.Tensor:  # writes the call count into the same buffer each time
        calls["n"] += 1
        buffer.fill_(calls["n"])
        return buffer

    bound = timer.bind("cpu")
    audit = bound.audit(as_list, choose=lambda n: n == 3)  # keeps the third sample only
    raw = bound.run(kernel, 6, None, audit)
    assert audit.index == 2 and audit.seen == len(raw["event_ms"]) == 6
    assert audit.kept is not None and audit.kept[0].positions is None  # small: kept whole
    # the third sample's value (after the warm-up calls), not what the buffer holds at the end
    third = raw["warmup_calls"] + 3
    assert audit.kept[0].values.tolist() == [float(third)] * 4
    assert buffer[0].item() > third


def test_a_later_pick_of_the_same_shape_is_copied_into_the_kept_tensors() -> None:
    audit = timer.bind("cpu").audit(as_list, choose=lambda n: True)
    audit.offer(0, torch.full((3,), 1.0))
    assert audit.kept is not None
    first = audit.kept[0].values
    audit.offer(1, torch.full((3,), 2.0))
    assert audit.index == 1 and audit.kept is not None
    assert audit.kept[0].values is first and first.tolist() == [2.0, 2.0, 2.0]


def test_every_sample_is_equally_likely_to_be_the_one_kept() -> None:
    bound = timer.bind("cpu")
    runs, samples = 3000, 6
    counts: Counter[int] = Counter()
    for _ in range(runs):
        audit = bound.audit(as_list)
        for i in range(samples):
            audit.offer(i, torch.zeros(1))
        assert audit.index is not None
        counts[audit.index] += 1
    expected = runs / samples  # 500; one standard deviation is ~20
    assert set(counts) == set(range(samples))
    assert all(abs(c - expected) < 120 for c in counts.values()), counts


class Lazy(torch.Tensor):
    pass


def test_outputs_that_are_not_plain_tensors_end_the_audit_with_an_error() -> None:
    audit = timer.bind("cpu").audit(as_list, choose=lambda n: True)
    audit.offer(0, torch.zeros(2).as_subclass(Lazy))
    assert audit.kept is None and audit.index is None
    assert audit.error is not None and "not a plain tensor" in audit.error
    audit.offer(1, torch.zeros(2))  # an ended audit stays ended: the server reports it
    assert audit.kept is None and audit.report()["error"] == audit.error


def test_a_large_output_is_kept_as_its_values_at_random_positions() -> None:
    audit = timer.bind("cpu").audit(as_list, choose=lambda n: True)
    big = torch.arange(timer.AUDIT_WHOLE_ELEMENTS + 7, dtype=torch.float64).reshape(-1, 1)
    audit.offer(0, big)
    assert audit.kept is not None
    kept = audit.kept[0]
    assert kept.shape == list(big.shape) and kept.positions is not None
    assert kept.values.numel() == kept.positions.numel() == timer.AUDIT_SAMPLED_ELEMENTS
    assert torch.equal(kept.values, kept.positions.to(torch.float64))  # value i sits at i
    again = timer.bind("cpu").audit(as_list, choose=lambda n: True)
    again.offer(0, big)
    assert again.kept is not None and not torch.equal(again.kept[0].positions, kept.positions)
