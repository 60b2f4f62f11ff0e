"""The timed samples the judge keeps for its audit (judge.clock.KeptSamples): chosen uniformly
after they ran, its own copies, large outputs as values at random positions."""

from __future__ import annotations

from collections import Counter

import torch

from judge import clock
from judge.clock import KeptSamples, time_run
from judge.handover import Clock
from tests.unit.judge.cpu_judge import vector_slots
from tests.unit.judge.test_clock import FakePartner, Stepped


def test_the_kept_outputs_are_copies_not_the_buffer_the_next_sample_overwrites() -> None:
    held = [torch.zeros(4)]
    kept = KeptSamples(places=1)
    kept.offer(0, held, lambda: [[1, 2, 3]])
    held[0].fill_(7.0)
    assert kept.kept[0].outputs[0].tolist() == [0.0] * 4
    assert kept.kept[0].input_prints == [[1, 2, 3]]


def test_every_sample_is_equally_likely_to_be_kept() -> None:
    runs, samples = 3000, 6
    counts: Counter[int] = Counter()
    for _ in range(runs):
        kept = KeptSamples(places=2)
        for i in range(samples):
            kept.offer(i, [torch.zeros(1)], list)
        assert kept.seen == samples and len(kept.kept) == 2
        counts.update(k.index for k in kept.kept)
    expected = runs * 2 / samples  # 1000; one standard deviation is ~26
    assert set(counts) == set(range(samples))
    assert all(abs(c - expected) < 150 for c in counts.values()), counts


def test_a_large_output_is_kept_as_its_values_at_random_positions(monkeypatch) -> None:
    monkeypatch.setattr(clock, "KEEP_WHOLE_BYTES", 1024)
    monkeypatch.setattr(clock, "AUDIT_POSITIONS", 100)
    big = torch.arange(10_000, dtype=torch.float64).reshape(100, 100)
    first, second = KeptSamples(places=1), KeptSamples(places=1)
    first.offer(0, [big], list)
    second.offer(0, [big], list)
    kept = first.kept[0]
    assert kept.positions[0] is not None and kept.outputs[0].numel() == 100
    assert torch.equal(kept.outputs[0], kept.positions[0].to(torch.float64))  # value i sits at i
    assert not torch.equal(kept.positions[0], second.kept[0].positions[0])


def test_input_prints_are_taken_only_for_the_samples_kept() -> None:
    asked: list[int] = []
    kept = KeptSamples(places=2)
    for i in range(100):
        kept.offer(i, [torch.zeros(1)], lambda i=i: asked.append(i) or [[i]])
    # each kept sample was printed when it was kept, and a sample that was never kept never was
    assert {k.index for k in kept.kept} <= set(asked)
    assert all(k.input_prints == [[k.index]] for k in kept.kept)
    assert len(asked) < 40  # ~2 x (1 + ln 50) ~ 10 expected of 100


def test_small_outputs_keep_the_most_samples_and_large_ones_the_least() -> None:
    small = [torch.empty(64, 64)]
    assert clock.kept_places(small, reference_ms=0.1) == clock.KEPT_SAMPLES_MAX
    # 128 MB a sample: four fit in the copies' budget
    assert clock.kept_places([torch.empty(32, 2**20)], reference_ms=0.1) == 4
    # 192 MB a sample: never fewer than the minimum
    assert clock.kept_places([torch.empty(48, 2**20), torch.empty(1)],
                             reference_ms=0.1) == clock.KEPT_SAMPLES_MIN


def test_a_slow_reference_keeps_as_many_samples_as_the_checks_budget_holds() -> None:
    """Every kept sample is checked by running the reference again: the count is fixed from
    the reference's own figure before the samples (nothing the kernel does moves it)."""
    small = [torch.empty(16)]
    per_check = 10.0 + clock.AUDIT_CHECK_MS
    assert clock.kept_places(small, reference_ms=10.0) == int(clock.AUDIT_BUDGET_MS // per_check)
    assert clock.kept_places(small, reference_ms=500.0) == clock.KEPT_SAMPLES_MIN


def test_an_output_kept_by_positions_costs_its_positions_not_its_size(monkeypatch) -> None:
    monkeypatch.setattr(clock, "KEEP_WHOLE_BYTES", 1024)
    monkeypatch.setattr(clock, "AUDIT_POSITIONS", 100)
    assert clock.kept_bytes(torch.empty(10_000, dtype=torch.float32)) == 100 * (4 + 8)
    assert clock.kept_bytes(torch.empty(16, dtype=torch.float32)) == 64


def test_fast_samples_are_kept_beside_the_drawn_ones_up_to_their_limit() -> None:
    never = KeptSamples(places=0)  # no place drawn: only the fast are kept
    never.offer(0, [torch.zeros(1)], list)
    for i in range(1, 1 + clock.FAST_KEPT_MAX + 2):
        never.offer(i, [torch.full((1,), float(i))], list, fast=True)
    assert [k.index for k in never.kept] == list(range(1, 1 + clock.FAST_KEPT_MAX))
    assert never.kept[0].outputs[0].tolist() == [1.0]


def test_a_run_keeps_the_samples_that_skipped_their_work_for_the_audit() -> None:
    # one sample in five returns at once; the others take 1 ms (less the 0.2 ms hand-over)
    intervals = [0.2 if i % 5 == 4 else 1.2 for i in range(20)]
    partner = FakePartner()
    slots = vector_slots(4)
    ran = time_run(Clock(partner, slots, Stepped(partner, intervals)),  # type: ignore[arg-type]
                   lambda i: [torch.full((4,), float(i))], lambda i, values: [[0]], 20,
                   [0.2] * 16, 0.5)
    kept = {k.index for k in ran.kept.kept}
    assert {9, 14, 19} <= kept  # (4 is among the first FAST_AFTER: nothing to compare with)
