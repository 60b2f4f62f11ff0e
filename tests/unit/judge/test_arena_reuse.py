"""A judge keeps the arenas of its last pairings and maps one again, zeroed, for a later
pairing of the same layout, only once the server has named that pairing free (its kernel's
processes gone): a real judge with a real reference and real (memfd) arenas on the CPU."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from judge import session as session_module
from judge.session import PARKED_MAX, JudgeSession
from shared.protocol import Calibrate, Calibrated, MapArena, Unpair
from tests.unit.judge.cpu_judge import loaded_judge


@dataclass
class Partner:
    """A kernel's process as far as the arena goes: what it was sent to map."""

    mapped: list[tuple[MapArena, int]] = field(default_factory=list)

    def map_arena(self, message: MapArena, fd: int) -> None:
        self.mapped.append((message, os.fstat(fd).st_ino))

    def close(self) -> None:
        pass


def pairing(judge: JudgeSession, number: int, free: list[int]) -> tuple[Calibrated, Partner]:
    """Pairing ``number``: the arena mapped (no null call measured: a kept calibration)."""
    partner = Partner()
    judge.partner, judge.pairing = partner, number  # type: ignore[assignment]
    answer = judge.calibrate(Calibrate(kept=True, free=free), [])
    assert isinstance(answer, Calibrated), answer
    return answer, partner


def test_an_arena_is_mapped_again_zeroed_only_for_a_pairing_the_server_named_free(
        tmp_path: Path) -> None:
    judge = loaded_judge(tmp_path, 1)
    first, one = pairing(judge, 1, [])
    assert not first.arena_reused
    assert judge.arena is not None
    judge.arena.inputs[0].fill_(7.0)  # what the first pairing left in it
    memory = os.fstat(judge.arena.fd).st_ino
    judge.unpair(Unpair(), [])
    # pairing 1's process may still be going: a new arena
    second, _ = pairing(judge, 2, [])
    assert not second.arena_reused and os.fstat(judge.arena.fd).st_ino != memory
    judge.unpair(Unpair(), [])
    # pairing 1's process is gone: its arena again, with nothing of pairing 1 in it
    third, three = pairing(judge, 3, [1])
    assert third.arena_reused
    assert three.mapped[0][1] == memory == one.mapped[0][1]
    assert three.mapped[0][0].layout == one.mapped[0][0].layout
    assert torch.count_nonzero(judge.arena.memory) == 0


def test_no_arena_is_reused_for_another_layout_or_a_pairing_not_named_free(
        tmp_path: Path) -> None:
    judge = loaded_judge(tmp_path, 1)
    pairing(judge, 1, [])
    judge.unpair(Unpair(), [])
    answer, _ = pairing(judge, 2, [5])  # free, but not the one the judge kept
    assert not answer.arena_reused
    judge.unpair(Unpair(), [])
    other = loaded_judge(tmp_path, 1, shape=512)  # a reference of other shapes
    other.parked = judge.parked
    answer, _ = pairing(other, 3, [1, 2])
    assert not answer.arena_reused


def test_a_judge_keeps_the_arenas_of_its_last_pairings_only_and_none_unnumbered(
        tmp_path: Path) -> None:
    judge = loaded_judge(tmp_path, 1)
    closed: list[int] = []
    for number in range(1, PARKED_MAX + 3):
        pairing(judge, number, [])
        assert judge.arena is not None
        arena = judge.arena
        real_close = arena.close

        def close(n: int = number, real: Any = real_close) -> None:
            closed.append(n)
            real()

        arena.close = close  # type: ignore[method-assign]
        judge.unpair(Unpair(), [])
    assert [n for n, _ in judge.parked] == list(range(3, PARKED_MAX + 3))
    assert closed == [1, 2]
    pairing(judge, 0, [])  # a pairing the server gave no number (the rehearsal's)
    unnumbered = judge.arena
    judge.unpair(Unpair(), [])
    assert all(arena is not unnumbered for _, arena in judge.parked)


def test_a_large_arena_is_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_module, "PARK_BYTES", 512)
    judge = loaded_judge(tmp_path, 1)
    pairing(judge, 1, [])
    judge.unpair(Unpair(), [])
    assert judge.parked == []


def test_kept_arenas_are_let_go_before_a_new_one_is_found_not_to_fit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    judge = loaded_judge(tmp_path, 1)
    pairing(judge, 1, [])
    judge.unpair(Unpair(), [])
    assert len(judge.parked) == 1
    real_create = session_module.Arena.create
    tries: list[int] = []

    def create(layout: Any, device: str) -> Any:
        tries.append(len(judge.parked))
        if judge.parked:  # no room while an arena is kept
            raise session_module.DoesNotFit("no room", layout.size, 0)
        return real_create(layout, device)

    monkeypatch.setattr(session_module.Arena, "create", create)
    answer, _ = pairing(judge, 2, [])  # pairing 1 not free: a new arena is needed
    assert not answer.arena_reused and tries == [1, 0] and judge.parked == []
