"""The kernel's process warms the address translations of the arena's GPU memory before each
judged sample (harness.timer.CudaTimer.warm_pages), in CPU mode reads the arena's inputs
(harness.timer.Timer.warm_pages), and lets go of that memory before it is unmapped: a read of
an unmapped page would be a fault of the harness, not of the kernel."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import pytest

from harness.arena import Arena
from kernel_side.session import KernelSession
from shared.protocol import ArenaLayout, ArenaMapped, MapArena


def mapped(where: str, monkeypatch: pytest.MonkeyPatch, device: str = "cpu"
           ) -> tuple[KernelSession, list[Any]]:
    events: list[Any] = []
    arena = SimpleNamespace(memory="the arena's bytes", input_bytes="the inputs' bytes",
                            outputs=[], close=lambda: events.append("unmapped"))
    monkeypatch.setattr(Arena, "attach", lambda *args, **kwargs: arena)
    timer = SimpleNamespace(sync=lambda: None,
                            warm_pages=lambda memory: events.append(("warm", memory)))
    side = KernelSession(device, timer)  # type: ignore[arg-type]
    read_fd, write_fd = os.pipe()
    os.close(write_fd)
    reply = side.handle(MapArena(layout=ArenaLayout.model_construct(where=where)), [read_fd])
    assert isinstance(reply, ArenaMapped), reply
    return side, events


def test_a_device_arena_has_its_pages_warmed_before_each_sample(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _, events = mapped("device", monkeypatch)
    assert events[-1] == ("warm", "the arena's bytes")


def test_a_host_memory_arena_beside_a_gpu_has_no_pages_to_warm(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _, events = mapped("host", monkeypatch, device="cuda")
    assert [e for e in events if e != ("warm", None)] == []


def test_in_cpu_mode_the_arenas_inputs_are_read_before_each_sample(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _, events = mapped("host", monkeypatch)
    assert events[-1] == ("warm", "the inputs' bytes")


@pytest.mark.parametrize("how", ["unpair", "map another"])
def test_the_timer_lets_go_of_the_arena_before_it_is_unmapped(
        how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    side, events = mapped("device", monkeypatch)
    events.clear()
    if how == "unpair":
        side.unpair()
    else:
        read_fd, write_fd = os.pipe()
        os.close(write_fd)
        side.handle(MapArena(layout=ArenaLayout.model_construct(where="device")), [read_fd])
    assert events[:2] == [("warm", None), "unmapped"]
