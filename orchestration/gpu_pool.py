"""Device slots: a GPU runs ``JOBS_PER_GPU`` jobs at a time (1 by default; with more, their
timings still take turns, see orchestration.gpu_gate).

Jobs wait for a slot in arrival order. In CPU mode the slots are ``MAX_WORKERS`` CPU slots.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Slot:
    index: int
    gpu_id: int | None  # the physical GPU, None in CPU mode


class DevicePool:
    def __init__(self, slots: list[Slot]) -> None:
        if not slots:
            raise ValueError("a device pool needs at least one slot")
        self.slots = slots
        self._free: asyncio.Queue[Slot] = asyncio.Queue()
        for slot in slots:
            self._free.put_nowait(slot)
        self._busy_since: dict[int, float] = {}
        self._busy_total = 0.0
        # per device (a GPU's slots are one device): jobs on it now, since when it has had
        # one, and its busy time before that
        self._device: dict[int, Slot] = {}
        for slot in slots:
            self._device.setdefault(self._unit(slot), slot)
        self._holding: dict[int, int] = {}
        self._device_since: dict[int, float] = {}
        self._device_busy: dict[int, float] = {}
        self._created = time.monotonic()
        self._waiting = 0

    @staticmethod
    def _unit(slot: Slot) -> int:
        return slot.gpu_id if slot.gpu_id is not None else -1 - slot.index

    async def acquire(self) -> Slot:
        """The next free slot; callers are served first come, first served."""
        self._waiting += 1
        try:
            slot = await self._free.get()
        finally:
            self._waiting -= 1
        now = time.monotonic()
        self._busy_since[slot.index] = now
        unit = self._unit(slot)
        self._holding[unit] = self._holding.get(unit, 0) + 1
        if self._holding[unit] == 1:
            self._device_since[unit] = now
        return slot

    def waiting(self) -> int:
        """Callers waiting for a slot now."""
        return self._waiting

    def release(self, slot: Slot) -> None:
        now = time.monotonic()
        started = self._busy_since.pop(slot.index)
        self._busy_total += now - started
        unit = self._unit(slot)
        self._holding[unit] -= 1
        if self._holding[unit] == 0:
            self._device_busy[unit] = (self._device_busy.get(unit, 0.0)
                                       + now - self._device_since.pop(unit))
        self._free.put_nowait(slot)

    def busy_shares(self) -> dict[Slot, float]:
        """Each device's share (0-1) of the time since the pool began with a job on it, keyed
        by the device's first slot."""
        now = time.monotonic()
        elapsed = max(now - self._created, 1e-9)
        return {slot: min(1.0, (self._device_busy.get(unit, 0.0)
                                + (now - self._device_since[unit] if unit in self._device_since else 0.0))
                          / elapsed) for unit, slot in self._device.items()}

    def utilization_pct(self) -> float:
        now = time.monotonic()
        busy = self._busy_total + sum(now - t for t in self._busy_since.values())
        capacity = (now - self._created) * len(self.slots)
        return 100.0 * busy / capacity if capacity > 0 else 0.0
