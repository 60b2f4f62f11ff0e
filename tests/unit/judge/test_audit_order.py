"""The audit checks the kept samples in a random order and may stop early only past its time
budget with the minimum checked (judge.audit)."""

from __future__ import annotations

from collections import Counter

import torch

from judge import audit
from judge.clock import KEPT_SAMPLES_MIN, Kept


def kept(index: int) -> Kept:
    return Kept(index, [torch.zeros(1)], [None], [])


def test_each_kept_sample_is_equally_likely_to_be_checked_first() -> None:
    places = [kept(i) for i in range(4)]
    first: Counter[int] = Counter(audit.checking_order(places)[0].index for _ in range(4000))
    assert set(first) == {0, 1, 2, 3}
    assert all(abs(n - 1000) < 150 for n in first.values()), first
    assert sorted(k.index for k in audit.checking_order(places)) == [0, 1, 2, 3]


def test_the_audit_stops_early_only_with_the_minimum_checked_and_its_budget_spent() -> None:
    budget = audit.AUDIT_BUDGET_MS
    assert not audit.checked_enough(0, budget * 10)
    assert not audit.checked_enough(KEPT_SAMPLES_MIN - 1, budget * 10)
    assert not audit.checked_enough(KEPT_SAMPLES_MIN, budget / 2)
    assert audit.checked_enough(KEPT_SAMPLES_MIN, budget)
