"""The judge's clock on the kernel's timed samples.

For each sample the judge, in its own process:

1. makes the sample's inputs from the secret (:class:`judge.inputs.SampleInputs`), outside
   the interval;
2. writes the inputs into the arena's input slots, flushes the L2, synchronises, and starts
   its clock (the kernel's process had the inputs for the microseconds between);
3. asks the kernel's process for the call: there the harness runs it between two CUDA events
   on a stream held until the call is enqueued, synchronises the whole device, copies the
   outputs into the arena's output slots and answers;
4. copies the output slots into its own memory and synchronises, and only then stops its
   clock.

Whatever produced the outputs (other streams, threads, a second CUDA context, a child
process, work left running after the call returned) ran inside that interval: outputs not
ready at the answer are caught by the audit of the copies kept here (:class:`KeptSamples`).
The interval also holds fixed costs (the handover's copies, two messages, two GPU context
switches): :func:`calibrate` measures them for the harness's null call, in the same pairing
(or in an earlier pairing of the same judge, at most ``KEEP_CALIBRATION_S`` before, with a
partner made alike), *before that partner's kernel code is loaded*, so no kernel can inflate
them. The server compares the interval less that cost with the CUDA-event figure the
kernel's process reported (:func:`profiling.integrity.judge`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.arena import Arena
from harness.tensors import tensors_of
from harness.timer import Timer, few, median, quick_warm_up_reason
from io_contract.tensor_utils import poison_value
from judge.partner import Partner
from shared.protocol import CallDone, CallPurpose, Extras, JudgedTiming, TimingReport
from shared.stopping import StoppingRule, sample_until

CALIBRATION_CALLS = 16
CALIBRATION_WARMUP = 3  # the first null calls pay for lazy set-up on both sides: dropped
HOLD_MS_MAX = 1.0  # a null call is at most this long (the wake-up costs are there by then)
# The audit keeps between KEPT_SAMPLES_MIN and KEPT_SAMPLES_MAX timed samples (chosen after
# they ran, uniformly): as many as KEEP_BYTES of copies hold. A kernel that skips its work on a
# share p of the samples escapes K checked ones with probability (1 - p)^K, and must skip more
# than half of them to move the median: at K = 2 that is up to 1 in 4 (seen on 2-core CI: a
# kernel that computed only after a pause between calls read 7.8x), at K = 8 under 1 in 400.
# Every kept sample is checked (the reference run again on its inputs, then compared): the
# count is fixed before the samples, from the reference's own figure (taken before the
# candidate existed), so nothing the kernel's process does moves it. AUDIT_BUDGET_MS over
# the reference's time plus AUDIT_CHECK_MS per check.
KEPT_SAMPLES_MIN = 2
KEPT_SAMPLES_MAX = 8
KEEP_BYTES = 512 * 2**20
AUDIT_BUDGET_MS = 60.0
AUDIT_CHECK_MS = 2.0
# An output up to this size is kept whole; beyond, its values at AUDIT_POSITIONS random
# positions drawn after the sample ran (a few MB whatever the output's size).
KEEP_WHOLE_BYTES = 256 * 2**20
AUDIT_POSITIONS = 1 << 20


def kept_bytes(slot: torch.Tensor) -> int:
    """What keeping one sample of output ``slot`` costs: the output, or its values and
    positions where it is kept by positions."""
    whole = slot.numel() * slot.element_size()
    if whole <= KEEP_WHOLE_BYTES:
        return whole
    return AUDIT_POSITIONS * (slot.element_size() + 8)


def kept_places(outputs: list[torch.Tensor], reference_ms: float) -> int:
    """How many timed samples the audit keeps (and checks) for outputs like ``outputs`` and a
    reference that runs ``reference_ms``: as many as the copies' and the checks' budgets
    hold, within KEPT_SAMPLES_MIN and KEPT_SAMPLES_MAX."""
    each = max(1, sum(kept_bytes(slot) for slot in outputs))
    checks = int(AUDIT_BUDGET_MS // (max(reference_ms, 0.0) + AUDIT_CHECK_MS))
    return max(KEPT_SAMPLES_MIN, min(KEPT_SAMPLES_MAX, KEEP_BYTES // each, checks))


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


@dataclass
class Kept:
    index: int
    outputs: list[torch.Tensor]
    positions: list[torch.Tensor | None]  # per output: None (kept whole) or flat positions
    input_prints: list[list[int]]


class KeptSamples:
    """Timed samples the audit will check, chosen uniformly after each sample ran.

    Reservoir sampling with the judge's own random source: after the n-th sample, it takes
    one of its K places (:func:`kept_places`) with probability K/n. The kernel's process cannot
    tell which samples are kept, so skipping the work on a share *p* of its samples is caught
    with probability about 1 - (1 - p)^K, and a share small enough to escape barely moves a
    median.
    """

    def __init__(self, places: int = KEPT_SAMPLES_MIN, urandom: Callable[[int], bytes] = os.urandom
                 ) -> None:
        self.places = places
        self.urandom = urandom
        self.kept: list[Kept] = []
        self.seen = 0

    def _draw(self, n: int) -> int:
        return int.from_bytes(self.urandom(8), "little") % n

    def place_for_next(self) -> int | None:
        """Whether the sample about to be offered is kept, and where (None: not kept)."""
        n = self.seen + 1
        if n <= self.places:
            return n - 1
        j = self._draw(n)
        return j if j < self.places else None

    def offer(self, index: int, held: list[torch.Tensor],
              prints: Callable[[], list[list[int]]]) -> None:
        """Sample ``index``'s outputs (``held``: the judge's own copy) were taken: keep them,
        or their values at random positions, if the sample is drawn, with the fingerprints of
        its inputs (``prints()``, asked only then: a print reads the whole input)."""
        place = self.place_for_next()
        self.seen += 1
        if place is None:
            return
        outputs: list[torch.Tensor] = []
        positions: list[torch.Tensor | None] = []
        for slot in held:
            if slot.numel() * slot.element_size() <= KEEP_WHOLE_BYTES:
                outputs.append(slot.clone())
                positions.append(None)
            else:
                gen = torch.Generator(device=slot.device)
                gen.manual_seed(int.from_bytes(self.urandom(8), "little") >> 1)
                where = torch.randint(0, slot.numel(), (AUDIT_POSITIONS,), generator=gen,
                                      device=slot.device)
                outputs.append(slot.reshape(-1).index_select(0, where))
                positions.append(where)
        kept = Kept(index, outputs, positions, prints())
        if place < len(self.kept):
            self.kept[place] = kept
        else:
            self.kept.append(kept)


@dataclass
class NullCalls:
    """The harness's null calls on the judge's clock: each call's interval, the harness's own
    figure of it, and the host's time enqueueing it (ms)."""

    trusted: list[float] = field(default_factory=list)
    events: list[float] = field(default_factory=list)
    enqueue: list[float] = field(default_factory=list)
    hold_ms: float = 0.0
    reference_ms: float = 0.0  # the reference's figure the hold was asked after (uncapped)

    def add(self, interval: float, done: CallDone) -> None:
        self.trusted.append(interval)
        self.events.append(done.event_ms or 0.0)
        if done.enqueue_ms is not None:
            self.enqueue.append(done.enqueue_ms)


def calibrate(partner: Partner, arena: Arena, timer: Timer, values: list[Any],
              hold_ms: float, trace: list[list[int]] | None = None) -> NullCalls:
    """The judge's interval for the harness's null call, and the harness's own figure of it
    (no kernel code loaded yet), ms. Each null call holds the device ``hold_ms`` (at most
    :data:`HOLD_MS_MAX`): the judge then waits for it as it will wait for a real call, and
    pays the same to wake up."""
    calls = NullCalls(hold_ms=min(max(hold_ms, 0.0), HOLD_MS_MAX),
                      reference_ms=max(hold_ms, 0.0))
    # the outputs are taken as a sample's are (their copy is no part of the call's cost)
    holder = [torch.empty_like(slot) for slot in arena.outputs]
    for i in range(CALIBRATION_WARMUP + CALIBRATION_CALLS):
        ms, done = _timed_call(partner, arena, timer, values, CallPurpose.CALIBRATE, i, holder,
                               calls.hold_ms, trace)
        if i >= CALIBRATION_WARMUP:
            calls.add(ms, done)
    return calls


def _timed_call(partner: Partner, arena: Arena, timer: Timer, values: list[Any],
                purpose: CallPurpose, index: int, holder: list[torch.Tensor] | None,
                hold_ms: float = 0.0, trace: list[list[int]] | None = None
                ) -> tuple[float, CallDone]:
    """One call on the judge's clock: (interval ms, the kernel's process's answer).

    The inputs are written and the L2 flushed before the clock starts: what the kernel's
    process could do with them before it is asked is what its GPU context gets between the
    judge's synchronisation and its next clock read (microseconds), while the copy's own cost,
    which grows with the inputs and shifts with the GPU's state, stays out of the interval."""
    now = time.perf_counter_ns
    timer.sync()
    began = now() if trace is not None else 0
    write_inputs(arena, values)
    timer.flush()
    timer.sync()
    t0 = now()
    done = partner.call(purpose, index, hold_ms)
    answered = now() if trace is not None else 0
    if holder is not None:
        for mine, slot in zip(holder, arena.outputs):
            if done.copied:
                mine.copy_(slot)
            else:  # nothing handed over: what the audit may keep of it is plainly wrong
                mine.fill_(poison_value(mine.dtype))
    timer.sync()
    t1 = now()
    if trace is not None:
        trace.append([began, t0, answered, t1, *done.stamps_ns])
    return (t1 - t0) / 1e6, done


# diagnostics: each call's host clock stamps (judge: start, sent, answered, end; then the
# kernel's process's: received, sample start, enqueued, synchronised, handed over)
TRACE_CALLS = bool(os.environ.get("KES_CALL_TRACE"))
# Between the samples, a null call: what the judge's interval holds beyond the call itself
# once the kernel is loaded (its process's state, the host's caches), next to the
# calibration's figure from before (see profiling.integrity.judge). After every NULL_EVERY-th
# sample until NULLS_DENSE of them are in, then after every NULL_EVERY_LATER-th: a null
# call costs what a sample does, and past a dozen more of them hardly move their median.
NULL_EVERY = 2
NULLS_DENSE = 12
NULL_EVERY_LATER = 8


def null_after(i: int) -> bool:
    """Whether a null call follows timed sample ``i`` (0-based)."""
    if i < NULL_EVERY * NULLS_DENSE:
        return (i + 1) % NULL_EVERY == 0
    return (i + 1) % NULL_EVERY_LATER == 0


@dataclass
class CandidateRun:
    """What one timing run of a candidate produced, for the server and the audit."""

    timing: JudgedTiming
    kept: KeptSamples
    prints: dict[int, list[list[int]]] = field(default_factory=dict)


def time_candidate(partner: Partner, arena: Arena, timer: Timer,
                   values_for: Callable[[int], list[Any]],
                   input_prints: Callable[[int, list[Any]], list[list[int]]],
                   num_trials: int | None, calibration: NullCalls,
                   first_calibration: NullCalls | None = None) -> CandidateRun:
    """Warm-up, samples on the judge's clock with null calls between them, the in-process
    extras; the raw run. ``values_for(i)``: sample ``i``'s inputs; ``input_prints(i, values)``:
    their fingerprints, asked only for the samples the audit keeps."""
    now = time.perf_counter_ns
    spent = {"inputs": 0.0, "samples": 0.0, "nulls": 0.0, "keep": 0.0}
    began = now()
    warm = partner.warm_up(few(num_trials))
    timer.measure_zero()  # the judge's own events around nothing, on the device just warmed
    warm_wall = (now() - began) / 1e6
    holder = [torch.empty_like(slot) for slot in arena.outputs]
    kept = KeptSamples(kept_places(holder, calibration.reference_ms))
    trusted: list[float] = []
    enqueue: list[float] = []
    nulls = NullCalls(hold_ms=calibration.hold_ms)
    trace: list[list[int]] | None = [] if TRACE_CALLS else None
    null_trace: list[list[int]] | None = [] if TRACE_CALLS else None
    fresh = 0

    def take(i: int) -> float:
        nonlocal fresh
        t0 = now()
        values = values_for(i)
        fresh += 1
        t1 = now()
        interval, done = _timed_call(partner, arena, timer, values, CallPurpose.SAMPLE, i,
                                     holder, trace=trace)
        t2 = now()
        trusted.append(interval)
        if done.enqueue_ms is not None:
            enqueue.append(done.enqueue_ms)
        # (the judge's own input values: the kernel's process only ever had the arena's copy)
        kept.offer(i, holder, lambda: input_prints(i, values))
        t3 = now()
        if null_after(i):
            # (the sample's inputs written again: the same copy, nothing new to the kernel)
            ms, null = _timed_call(partner, arena, timer, values, CallPurpose.CALIBRATE, i,
                                   holder, nulls.hold_ms, null_trace)
            nulls.add(ms, null)
        t4 = now()
        spent["inputs"] += (t1 - t0) / 1e6
        spent["samples"] += (t2 - t1) / 1e6
        spent["keep"] += (t3 - t2) / 1e6
        spent["nulls"] += (t4 - t3) / 1e6
        return float(done.event_ms) if done.event_ms is not None else interval

    rule = StoppingRule.for_request(num_trials)
    began = now()
    event_ms, stopped_by = sample_until(take, lambda: now() / 1e9, rule)
    sampling_ms = (now() - began) / 1e6
    began = now()
    extras = partner.extras(Extras(median_ms=median(event_ms), samples=len(event_ms),
                                   num_trials=num_trials)).report
    extras_wall = (now() - began) / 1e6
    report = TimingReport(**{**extras.model_dump(), "event_ms": event_ms})
    # the kernel's process's own parts of the extras, and what the rest of the judge's wall
    # time went to: messages and the kernel's process's bookkeeping
    report.spent_ms = {"warm_up": warm_wall, **spent, **extras.spent_ms}
    report.spent_ms["handover"] = max(0.0, extras_wall - sum(extras.spent_ms.values()))
    report.warmup_calls, report.warmup_ms = warm.calls, warm.ms
    report.warmup_reason = quick_warm_up_reason(num_trials)
    report.sample_rule = "adaptive" if rule.adaptive else "fixed"
    report.stopped_by, report.sampling_ms = stopped_by, sampling_ms
    report.fresh_inputs = fresh
    timing = JudgedTiming(kernel=report, trusted_ms=trusted, calibration_ms=calibration.trusted,
                          calibration_event_ms=calibration.events, null_ms=nulls.trusted,
                          null_event_ms=nulls.events,
                          null_hold_ms=timer.least_hold_ms(calibration.hold_ms),
                          first_calibration_ms=first_calibration.trusted
                          if first_calibration else [],
                          first_calibration_event_ms=first_calibration.events
                          if first_calibration else [],
                          enqueue_ms=enqueue, null_enqueue_ms=nulls.enqueue,
                          # the judge's own zero, not the one the kernel's process reported
                          event_zero_ms=timer.event_zero_ms,
                          trace={"samples": trace, "nulls": null_trace or []}
                          if trace is not None else {})
    return CandidateRun(timing, kept)

