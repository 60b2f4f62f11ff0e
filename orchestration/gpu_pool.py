"""Device slots: each GPU runs one job at a time (timing two jobs on one GPU corrupts both).

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
        self._slot_busy: dict[int, float] = {}
        self._created = time.monotonic()

    async def acquire(self) -> Slot:
        """The next free slot; callers are served first come, first served."""
        slot = await self._free.get()
        self._busy_since[slot.index] = time.monotonic()
        return slot

    def waiting(self) -> int:
        """Callers waiting for a slot now."""
        waiters = getattr(self._free, "_getters", ())
        return sum(1 for w in waiters if not w.done())

    def release(self, slot: Slot) -> None:
        started = self._busy_since.pop(slot.index)
        self._busy_total += time.monotonic() - started
        self._slot_busy[slot.index] = self._slot_busy.get(slot.index, 0.0) + time.monotonic() - started
        self._free.put_nowait(slot)

    def busy_shares(self) -> dict[Slot, float]:
        """Each slot's share (0-1) of the time since the pool began spent running jobs."""
        now = time.monotonic()
        elapsed = max(now - self._created, 1e-9)
        return {slot: min(1.0, (self._slot_busy.get(slot.index, 0.0)
                                + (now - self._busy_since[slot.index] if slot.index in self._busy_since else 0.0))
                          / elapsed) for slot in self.slots}

    def utilization_pct(self) -> float:
        now = time.monotonic()
        busy = self._busy_total + sum(now - t for t in self._busy_since.values())
        capacity = (now - self._created) * len(self.slots)
        return 100.0 * busy / capacity if capacity > 0 else 0.0
