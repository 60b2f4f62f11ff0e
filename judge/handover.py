"""The judge's part of a timed call's hand-over, and its clock (:mod:`harness.handover` draws
both processes' parts).

Each hand-over (a timed sample, or the harness's null call) is one interval on the judge's
clock: the inputs written into the arena after the clock started, the outputs in the judge's
own memory before it stopped. On a GPU the judge's part is enqueued behind a gate on its
stream (:mod:`harness.stream_gate`) that opens once the kernel's process says its part is
enqueued, so the interval holds GPU work only.

**One ahead.** A GPU hand-over's host part (the request, the kernel's process enqueueing its
call, the answer) need not wait for the last hand-over's device part: :class:`Lookahead`
begins the next hand-over, its part enqueued behind the last one's on the judge's stream,
before it takes the last one's interval. The device then runs the hand-overs back to back,
each interval still its own events around its own work in the same order, and the host's
round trip is off the job's time. It stops the moment a call waits for the device from
inside (its process cannot say its part is enqueued before its stream runs), and the CPU's
hand-over, whose interval holds both processes' host work, never begins one ahead.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

from harness.arena import Arena
from harness.tensors import tensors_of
from harness.timer import Timer
from io_contract.tensor_utils import poison_value
from judge.partner import CallOverran, Partner
from shared.protocol import CallDone, CallPurpose

# How long the judge holds its clock for the kernel's process to say its call is enqueued;
# a call that waits for the device from inside (a host copy, .item(), a synchronise) does so
# only once its stream runs. After LATE_IN_A_ROW such calls the run stops waiting.
ENQUEUE_WAIT_S = 0.25
LATE_IN_A_ROW = 3
# The judge keeps a second copy of the outputs for the hand-over begun ahead up to this size
# (beyond, the device's part of a hand-over outweighs the host's round trip anyway).
AHEAD_HOLDER_BYTES = 256 * 2**20


def write_inputs(arena: Arena, values: list[Any]) -> None:
    """Copy the tensors of ``values`` into the arena's input slots, in order. On a GPU the
    copies are asynchronous: the caller synchronises before the kernel's process, which reads
    the slots from its own context, is asked to run on them."""
    tensors = tensors_of(values)
    if len(tensors) != len(arena.inputs):
        raise ValueError(f"the reference made {len(tensors)} input tensor(s) where its first "
                         f"trial made {len(arena.inputs)}")
    for slot, t in zip(arena.inputs, tensors):
        if slot.shape != t.shape or slot.dtype != t.dtype:
            raise ValueError(
                "the reference's inputs change shape or dtype between calls "
                f"({list(slot.shape)} {slot.dtype} at first, then {list(t.shape)} {t.dtype}): "
                "a comparison needs inputs of one layout")
        slot.copy_(t)


class HandOver(Protocol):
    """One timed call handed over to the kernel's process on the judge's clock."""

    holder: list[torch.Tensor]  # the judge's copy of the outputs of the last call finished
    released_early: int  # calls whose clock ran before the kernel's process enqueued them

    def call(self, values: list[Any], purpose: CallPurpose, index: int, seq: int,
             deadline: float) -> tuple[float, CallDone]:
        """(the judge's interval in ms, the kernel's process's answer). Raises
        :class:`CallOverran` past ``deadline`` (a ``perf_counter`` time)."""
        ...


@runtime_checkable
class BeginsAhead(Protocol):
    """A hand-over that can begin before the last one's interval is taken."""

    ahead: bool  # whether it can here
    released_early: int

    def begin(self, values: list[Any], purpose: CallPurpose, index: int, seq: int,
              deadline: float) -> Begun: ...

    def finish(self, begun: Begun, deadline: float) -> tuple[float, CallDone]: ...


@dataclass
class Begun:
    """A hand-over whose part is enqueued on the device and whose answer came; its interval
    not yet taken (:meth:`DeviceHandOver.finish`)."""

    seq: int
    done: CallDone
    start: Any  # its two events
    end: Any
    holder: list[torch.Tensor]  # where its outputs land


class Clock:
    """The judge's clock of one pairing: numbers its hand-overs (each a sample or a null
    call), the judge's copy of the last finished call's outputs in :attr:`holder`."""

    def __init__(self, partner: Partner, arena: Arena, hand_over: HandOver) -> None:
        self.partner, self.arena, self.hand_over = partner, arena, hand_over
        self.seq = 0

    def call(self, values: list[Any], purpose: CallPurpose, index: int,
             deadline: float) -> tuple[float, CallDone]:
        self.seq += 1
        return self.hand_over.call(values, purpose, index, self.seq, deadline)

    @property
    def ahead(self) -> bool:
        """Whether the next hand-over may begin before the last one's interval is taken: a
        hand-over that can, where no call has yet waited for the device from inside."""
        over = self.hand_over
        return isinstance(over, BeginsAhead) and over.ahead and over.released_early == 0

    def begin(self, values: list[Any], purpose: CallPurpose, index: int,
              deadline: float) -> Begun:
        assert isinstance(self.hand_over, BeginsAhead)
        self.seq += 1
        return self.hand_over.begin(values, purpose, index, self.seq, deadline)

    def finish(self, begun: Begun, deadline: float) -> tuple[float, CallDone]:
        assert isinstance(self.hand_over, BeginsAhead)
        return self.hand_over.finish(begun, deadline)

    @property
    def holder(self) -> list[torch.Tensor]:
        """The judge's copy of the last finished call's outputs."""
        return self.hand_over.holder


Key = tuple[str, int]  # a hand-over of a run: ("sample", i) or ("null", i)


class Lookahead:
    """A run's hand-overs, each begun one ahead of the one whose interval is taken where the
    clock allows it (:attr:`Clock.ahead`), else run whole when their interval is asked for.
    Intervals are taken in the order the hand-overs began."""

    def __init__(self, clock: Clock, on: bool = True) -> None:
        self.clock, self.on = clock, on
        self.begun: deque[tuple[Key, list[Any], Begun]] = deque()

    @property
    def open(self) -> bool:
        """Whether another hand-over may begin now (at most two begun at once)."""
        return self.on and self.clock.ahead and len(self.begun) < 2

    def begin(self, key: Key, values: list[Any], purpose: CallPurpose, index: int,
              deadline: float) -> None:
        """Begin hand-over ``key`` now if the clock may and it has not begun."""
        if not self.open or any(k == key for k, _, _ in self.begun):
            return
        try:
            begun = self.clock.begin(values, purpose, index, deadline)
        except BaseException:
            self.begun.clear()  # (the clock has let every hand-over begun go)
            raise
        self.begun.append((key, values, begun))

    def values(self, key: Key) -> list[Any] | None:
        """The inputs hand-over ``key`` began with, if it began."""
        return next((v for k, v, _ in self.begun if k == key), None)

    def interval(self, key: Key, values: list[Any], purpose: CallPurpose, index: int,
                 deadline: float) -> tuple[float, CallDone]:
        """Hand-over ``key``'s interval: taken where it began, else the whole hand-over now."""
        if self.begun and self.begun[0][0] == key:
            _, _, begun = self.begun.popleft()
            try:
                return self.clock.finish(begun, deadline)
            except BaseException:
                self.begun.clear()
                raise
        if self.begun:
            raise RuntimeError(f"hand-over {key} asked for before {self.begun[0][0]}, begun first")
        return self.clock.call(values, purpose, index, deadline)

    def series(self, calls: list[tuple[Key, list[Any], CallPurpose, int]],
               deadline: float) -> list[float]:
        """The intervals of ``calls`` in order, each begun while the one before runs."""
        intervals: list[float] = []
        for n, (key, values, purpose, index) in enumerate(calls):
            self.begin(key, values, purpose, index, deadline)
            if n + 1 < len(calls):
                self.begin(*calls[n + 1], deadline)
            ms, _ = self.interval(key, values, purpose, index, deadline)
            intervals.append(ms)
        return intervals

    def drop(self, deadline: float) -> None:
        """Let every hand-over begun end, its interval unused (a sample begun ahead of a run
        that stopped)."""
        while self.begun:
            _, _, begun = self.begun.popleft()
            try:
                self.clock.finish(begun, deadline)
            except BaseException:
                self.begun.clear()
                raise


class DeviceHandOver:
    """The GPU's hand-over (:mod:`harness.handover`): the judge's part enqueued behind a gate,
    opened once the kernel's process says its part is enqueued (or after
    :data:`ENQUEUE_WAIT_S`: a call that waits for the device from inside never says so until
    its stream runs). Two sets of events and output copies, so that one hand-over can begin
    while the last one's device part runs (:class:`Lookahead`)."""

    def __init__(self, partner: Partner, arena: Arena, timer: Timer, values: list[Any]) -> None:
        from harness.handover import DONE, GO, DeviceWords
        from harness.stream_gate import StreamGate

        self.partner, self.arena, self.timer = partner, arena, timer
        outputs = sum(slot.numel() * slot.element_size() for slot in arena.outputs)
        self.holders = [[torch.empty_like(slot) for slot in arena.outputs]]
        if outputs <= AHEAD_HOLDER_BYTES:
            try:  # (a problem that fills the GPU takes one hand-over at a time)
                self.holders.append([torch.empty_like(slot) for slot in arena.outputs])
            except torch.OutOfMemoryError:
                pass
        copies = len(self.holders)
        self.holder = self.holders[0]
        self.ahead = copies > 1
        stream = torch.cuda.current_stream()
        self.stream, self.handle = stream, int(stream.cuda_stream)
        self.words = DeviceWords()
        self.gate = StreamGate(torch, stream, watchdog_s=None)
        self.go, self.done = arena.word_address(GO), arena.word_address(DONE)
        self.side = torch.cuda.Stream()  # writes DONE itself where a call overran
        self.events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                       for _ in range(copies)]
        self.released_early = 0
        self.wait_s = ENQUEUE_WAIT_S
        self.late_in_a_row = 0
        self.last_seq = 0  # the last hand-over begun
        # every kernel of the judge's part launched once before any gate: a module loaded
        # lazily behind the gate would wait for the device, which waits for the gate
        write_inputs(arena, values)
        timer.flush()
        for holder in self.holders:
            for mine, slot in zip(holder, arena.outputs):
                mine.copy_(slot)
        timer.sync()

    def call(self, values: list[Any], purpose: CallPurpose, index: int, seq: int,
             deadline: float) -> tuple[float, CallDone]:
        return self.finish(self.begin(values, purpose, index, seq, deadline), deadline)

    def begin(self, values: list[Any], purpose: CallPurpose, index: int, seq: int,
              deadline: float) -> Begun:
        """Enqueue hand-over ``seq``'s part behind the gate, ask for the call, and open the
        gate once the kernel's process says its part is enqueued."""
        stream = self.stream
        start, end = self.events[seq % len(self.events)]
        holder = self.holders[seq % len(self.holders)]
        self.last_seq = seq
        self.gate.hold()
        opened = False
        try:
            start.record(stream)
            write_inputs(self.arena, values)
            self.timer.flush()
            self.words.write(self.handle, self.go, seq)
            self.words.wait(self.handle, self.done, seq)
            for mine, slot in zip(holder, self.arena.outputs):
                mine.copy_(slot)
            end.record(stream)
            self.partner.ask(purpose, index, seq)
            done = self.partner.answer(index, self.wait_s)
            if done is None:  # the call waits for the device from inside: let the clock run
                self.gate.release()
                opened = True
                self.released_early += 1
                self.late_in_a_row += 1
                if self.late_in_a_row >= LATE_IN_A_ROW:
                    self.wait_s = 0.0  # (it will every time: no call waits for the gate)
                done = self.partner.answer(index, max(0.0, deadline - time.perf_counter()))
                if done is None:
                    raise CallOverran("the kernel's process did not answer")
            else:
                self.late_in_a_row = 0
        except BaseException:
            if not opened:
                self.gate.release()
            self._unstick(seq)
            raise
        if not opened:
            self.gate.release()
        return Begun(seq, done, start, end, holder)

    def finish(self, begun: Begun, deadline: float) -> tuple[float, CallDone]:
        """Hand-over ``begun``'s interval, once its device part ended; its outputs are then
        :attr:`holder`."""
        if not _finished(begun.end, deadline):
            self._unstick(self.last_seq)
            raise CallOverran("the call's work on the device did not end")
        if not begun.done.copied:  # nothing handed over: what the audit may keep of it is wrong
            for mine in begun.holder:
                mine.fill_(poison_value(mine.dtype))
        self.holder = begun.holder
        return float(begun.start.elapsed_time(begun.end)), begun.done

    def _unstick(self, seq: int) -> None:
        """Let the judge's stream past its waits for calls up to ``seq`` that will not signal
        (the kernel's process failed, or its call overran): DONE written from another
        stream."""
        self.words.write(int(self.side.cuda_stream), self.done, seq)
        self.timer.sync()


class HostHandOver:
    """The CPU's hand-over (:mod:`harness.handover`): the inputs written after the clock
    started, then the call asked for and its answer awaited, both processes asleep between."""

    def __init__(self, partner: Partner, arena: Arena, timer: Timer, values: list[Any]) -> None:
        self.partner, self.arena = partner, arena
        self.holder = [torch.empty_like(slot) for slot in arena.outputs]
        self.released_early = 0
        self._now = time.perf_counter_ns

    def call(self, values: list[Any], purpose: CallPurpose, index: int, seq: int,
             deadline: float) -> tuple[float, CallDone]:
        now = self._now
        t0 = now()
        write_inputs(self.arena, values)
        self.partner.ask(purpose, index, seq)
        done = self.partner.answer(index, max(0.0, deadline - time.perf_counter()))
        for mine, slot in zip(self.holder, self.arena.outputs):
            mine.copy_(slot)
        t1 = now()
        if done is None:
            raise CallOverran("the call did not end")
        if not done.copied:
            for mine in self.holder:
                mine.fill_(poison_value(mine.dtype))
        return (t1 - t0) / 1e6, done


def _finished(event: Any, deadline: float) -> bool:
    """Wait for ``event`` until ``deadline``: polled, then polled with short sleeps."""
    spin_until = time.perf_counter() + 0.002
    while not event.query():
        at = time.perf_counter()
        if at >= deadline:
            return False
        if at > spin_until:
            time.sleep(0.0001)
    return True


def hand_over_for(partner: Partner, arena: Arena, timer: Timer, values: list[Any]) -> HandOver:
    """The hand-over of ``arena``'s kind (GPU memory, or host memory), ready for calls."""
    if arena.layout.where == "device":
        return DeviceHandOver(partner, arena, timer, values)
    return HostHandOver(partner, arena, timer, values)
