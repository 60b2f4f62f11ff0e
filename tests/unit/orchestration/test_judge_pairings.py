"""The server's side of a judge's kept arenas: pairings numbered in order, and a pairing free
only once its kernel's process is gone with everything it started."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from orchestration.references import PAIRINGS_KEPT, Judge


def kernel(contained: bool = True) -> Any:
    return SimpleNamespace(contained=contained, status=None)


def test_pairings_are_numbered_in_order_and_only_the_latest_followed() -> None:
    judge = Judge(worker=None, key="k", loaded=None, device=None)  # type: ignore[arg-type]
    numbers = [judge.paired_with(kernel()) for _ in range(PAIRINGS_KEPT + 2)]
    assert numbers == list(range(1, PAIRINGS_KEPT + 3))
    assert sorted(judge.partners) == numbers[-PAIRINGS_KEPT:]


def test_a_pairing_is_free_once_its_contained_kernel_process_is_gone() -> None:
    judge = Judge(worker=None, key="k", loaded=None, device=None)  # type: ignore[arg-type]
    running, gone, loose = kernel(), kernel(), kernel(contained=False)
    for k in (running, gone, loose):
        judge.paired_with(k)
    gone.status = loose.status = 0
    assert judge.free_pairings() == [2]
