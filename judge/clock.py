"""The judge's clock on timed samples: the reference's and the candidate's, by one procedure.

For each timed sample the judge, in its own process:

1. makes the sample's inputs from the secret (:class:`harness.inputs.SampleInputs`), before
   its clock runs: nothing of them is in the arena yet;
2. hands the call over (:mod:`harness.handover`): its clock starts, the inputs are written
   into the arena's input slots (and the L2 flushed), the kernel's process runs the call and
   copies its outputs into the output slots, the judge copies those into its own memory, and
   only then the clock stops. On a GPU both processes' parts run on the device in that
   order, behind a gate the judge opens once the kernel's process has enqueued its part, so
   the interval holds GPU work only (two CUDA events on the judge's stream); on the CPU both
   spin on words in the arena.

Whatever produced the outputs (other streams, threads, a second CUDA context, a child
process) ran inside that interval, after the inputs existed: outputs not ready when the
clock stopped are caught by the audit of the copies kept here (:class:`KeptSamples`). The
interval also holds the hand-over's fixed cost (the inputs' and outputs' copies, the flush,
two GPU context switches): :func:`calibrate` measures it for the harness's null call (the
same hand-over, no call) before the partner has loaded any code, and null calls between the
samples measure it again; the server subtracts it (:func:`profiling.integrity.judge`).

A timing run has a budget of wall time (:data:`READING_BUDGET_S`, a single call at most
:data:`CALL_BUDGET_S`): a kernel whose calls get slower and slower, or that never returns,
ends its run with what was measured and why, and frees the device for the next job.
"""

from __future__ import annotations

import os
import time
from bisect import insort
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from harness.arena import Arena
from harness.tensors import tensors_of
from harness.timer import Timer, few, median, quick_warm_up_reason
from io_contract.tensor_utils import poison_value
from judge.partner import CallOverran, Partner
from shared.protocol import CallDone, CallPurpose, Extras, JudgedTiming, TimingReport
from shared.stopping import StoppingRule, median_error, sample_until

CALIBRATION_CALLS = 16
CALIBRATION_WARMUP = 3  # the first null calls pay for lazy set-up on both sides: dropped
# The null call is measured this many times, CALIBRATION_PAUSE_S apart, and the round with the
# lowest median kept: a round the host disturbed reads high, and a high figure subtracted
# makes every sample read fast (the null calls between samples, which may only lower it, are
# the kernel's process's to slow).
CALIBRATION_ROUNDS = 2
CALIBRATION_PAUSE_S = 0.01
NULL_EVERY = 4  # a null call after every NULL_EVERY-th sample
# In an adaptive run, once the samples so far read under this share of the hand-over's cost,
# a null call after every sample: the null calls' median is then as much of the figure's
# error as the samples' (the run samples until both are precise: shared.stopping)
DENSE_NULLS_SHARE = 0.25
# and after the samples as many as a short run needs to have these, the least the server
# takes in place of the calibration's (profiling.integrity.NULLS_AFTER_MIN)
NULLS_AT_LEAST = 4
# A whole timing run (warm-up, samples, null calls, the figures beside) ends after this much
# wall time whatever happens, and a single call after CALL_BUDGET_S: the device is then free
# for the next job, and the result says why the run ended early.
READING_BUDGET_S = 60.0
CALL_BUDGET_S = 30.0
# Beyond the samples the rule asks for, sampling stops once this share of the budget is spent.
SAMPLING_SHARE = 0.5
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
# Beside them, up to FAST_KEPT_MAX samples that took under FAST_SHARE of the median of the
# samples before them (once FAST_AFTER have run) are kept and checked: a call that skipped
# its work is fast, and a fast honest call (the host quiet again) passes its check.
FAST_KEPT_MAX = 4
FAST_SHARE = 0.5
FAST_AFTER = 4
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
        self.drawn: list[Kept] = []
        self.fast: list[Kept] = []  # samples far under the median so far, kept beside the drawn
        self.seen = 0

    @property
    def kept(self) -> list[Kept]:
        """Every sample the audit checks: those drawn, then those kept for being fast."""
        return [*self.drawn, *(k for k in self.fast if all(k is not d for d in self.drawn))]

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
              prints: Callable[[], list[list[int]]], fast: bool = False) -> None:
        """Sample ``index``'s outputs (``held``: the judge's own copy) were taken: keep them,
        or their values at random positions, if the sample is drawn, or is ``fast`` (far under
        the samples before it: a call that skipped its work) while FAST_KEPT_MAX allow, with
        the fingerprints of its inputs (``prints()``, asked only then: a print reads the
        whole input)."""
        place = self.place_for_next()
        self.seen += 1
        keep_fast = fast and len(self.fast) < FAST_KEPT_MAX
        if place is None and not keep_fast:
            return
        kept = self._kept(index, held, prints)
        if keep_fast:  # (kept whatever later draws evict from the drawn places)
            self.fast.append(kept)
        if place is None:
            return
        if place < len(self.drawn):
            self.drawn[place] = kept
        else:
            self.drawn.append(kept)

    def _kept(self, index: int, held: list[torch.Tensor],
              prints: Callable[[], list[list[int]]]) -> Kept:
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
        return Kept(index, outputs, positions, prints())


class HandOver(Protocol):
    """One timed call handed over to the kernel's process on the judge's clock."""

    holder: list[torch.Tensor]  # the judge's copy of the last call's outputs
    released_early: int  # calls whose clock ran before the kernel's process enqueued them

    def call(self, values: list[Any], purpose: CallPurpose, index: int, seq: int,
             deadline: float) -> tuple[float, CallDone]:
        """(the judge's interval in ms, the kernel's process's answer). Raises
        :class:`CallOverran` past ``deadline`` (a ``perf_counter`` time)."""
        ...


class Clock:
    """The judge's clock of one pairing: numbers its hand-overs (each a sample or a null
    call), the judge's copy of the last call's outputs in :attr:`holder`."""

    def __init__(self, partner: Partner, arena: Arena, hand_over: HandOver) -> None:
        self.partner, self.arena, self.hand_over = partner, arena, hand_over
        self.seq = 0

    def call(self, values: list[Any], purpose: CallPurpose, index: int,
             deadline: float) -> tuple[float, CallDone]:
        self.seq += 1
        return self.hand_over.call(values, purpose, index, self.seq, deadline)

    @property
    def holder(self) -> list[torch.Tensor]:
        """The judge's copy of the last call's outputs."""
        return self.hand_over.holder


class DeviceHandOver:
    """The GPU's hand-over (:mod:`harness.handover`): the judge's part enqueued behind a gate,
    opened once the kernel's process says its part is enqueued (or after
    :data:`ENQUEUE_WAIT_S`: a call that waits for the device from inside never says so until
    its stream runs)."""

    def __init__(self, partner: Partner, arena: Arena, timer: Timer, values: list[Any]) -> None:
        from harness.handover import DONE, GO, DeviceWords
        from harness.stream_gate import StreamGate

        self.partner, self.arena, self.timer = partner, arena, timer
        self.holder = [torch.empty_like(slot) for slot in arena.outputs]
        stream = torch.cuda.current_stream()
        self.stream, self.handle = stream, int(stream.cuda_stream)
        self.words = DeviceWords()
        self.gate = StreamGate(torch, stream, watchdog_s=None)
        self.go, self.done = arena.word_address(GO), arena.word_address(DONE)
        self.side = torch.cuda.Stream()  # writes DONE itself where a call overran
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        self.released_early = 0
        self.wait_s = ENQUEUE_WAIT_S
        self.late_in_a_row = 0
        # every kernel of the judge's part launched once before any gate: a module loaded
        # lazily behind the gate would wait for the device, which waits for the gate
        write_inputs(arena, values)
        timer.flush()
        for mine, slot in zip(self.holder, arena.outputs):
            mine.copy_(slot)
        timer.sync()

    def call(self, values: list[Any], purpose: CallPurpose, index: int, seq: int,
             deadline: float) -> tuple[float, CallDone]:
        stream = self.stream
        self.gate.hold()
        opened = False
        try:
            self.start.record(stream)
            write_inputs(self.arena, values)
            self.timer.flush()
            self.words.write(self.handle, self.go, seq)
            self.words.wait(self.handle, self.done, seq)
            for mine, slot in zip(self.holder, self.arena.outputs):
                mine.copy_(slot)
            self.end.record(stream)
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
        if not _finished(self.end, deadline):
            self._unstick(seq)
            raise CallOverran("the call's work on the device did not end")
        if not done.copied:  # nothing handed over: what the audit may keep of it is wrong
            for mine in self.holder:
                mine.fill_(poison_value(mine.dtype))
        return float(self.start.elapsed_time(self.end)), done

    def _unstick(self, seq: int) -> None:
        """Let the judge's stream past its wait for a call that will not signal (the kernel's
        process failed, or its call overran): DONE written from another stream."""
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


# How long the judge holds its clock for the kernel's process to say its call is enqueued;
# a call that waits for the device from inside (a host copy, .item(), a synchronise) does so
# only once its stream runs. After LATE_IN_A_ROW such calls the run stops waiting.
ENQUEUE_WAIT_S = 0.25
LATE_IN_A_ROW = 3


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


def calibrate(clock: Clock, values: list[Any]) -> list[float]:
    """The judge's interval for the harness's null call, ms (no kernel code loaded yet)."""
    deadline = time.perf_counter() + READING_BUDGET_S
    rounds: list[list[float]] = []
    index = 0
    for round_ in range(CALIBRATION_ROUNDS):
        if round_:
            time.sleep(CALIBRATION_PAUSE_S)
        calls: list[float] = []
        for i in range((CALIBRATION_WARMUP if not round_ else 0) + CALIBRATION_CALLS):
            ms, _ = clock.call(values, CallPurpose.CALIBRATE, index, deadline)
            index += 1
            if round_ or i >= CALIBRATION_WARMUP:
                calls.append(ms)
        rounds.append(calls)
    return min(rounds, key=median)


# A run whose samples rise this much from its first quarter to its last, steadily (a rank
# correlation of at least SLOWING_RANK with their order), is cut short: each call of such a
# kernel is slower than the last (it leaks memory, streams or handles between calls), so no
# number of samples makes its figure settle.
SLOWING_RATIO = 1.5
SLOWING_RANK = 0.9
SLOWING_MIN_SAMPLES = 8


def slowing(samples: list[float]) -> float | None:
    """How much slower the last quarter of ``samples`` runs than the first, where they rise
    steadily in the order taken (None: they do not)."""
    n = len(samples)
    if n < SLOWING_MIN_SAMPLES:
        return None
    quarter = max(2, n // 4)
    first, last = median(samples[:quarter]), median(samples[-quarter:])
    if first <= 0 or last < SLOWING_RATIO * first:
        return None
    ranks = {i: r for r, i in enumerate(sorted(range(n), key=samples.__getitem__))}
    d2 = sum((i - ranks[i]) ** 2 for i in range(n))
    rho = 1 - 6 * d2 / (n * (n * n - 1))
    return last / first if rho >= SLOWING_RANK else None


class NullCalls:
    """The null calls of one timing run, between its samples: when one is due (after every
    NULL_EVERY-th sample; with ``dense``, after every sample of calls far cheaper than the
    hand-over), and how precisely they know the hand-over's cost."""

    def __init__(self, calibration: list[float], dense: bool) -> None:
        self.calibration, self.dense = calibration, dense
        self.cost_ms = median(calibration)
        self.figures: list[float] = []

    def due(self, i: int, nets: list[float]) -> bool:
        """Whether a null call follows sample ``i``, given the samples' figures so far."""
        if (i + 1) % NULL_EVERY == 0:
            return True
        return self.dense and len(nets) >= FAST_AFTER and \
            median(nets) < DENSE_NULLS_SHARE * self.cost_ms

    def error(self) -> float:
        """The standard error of the hand-over's cost subtracted, ms: the null calls' between
        the samples once there are enough of them, else the calibration's."""
        return median_error(sorted(self.figures if len(self.figures) >= NULLS_AT_LEAST
                                   else self.calibration))


@dataclass
class CandidateRun:
    """What one timing run produced, for the server and the audit (``beside``: the timing of
    the reference's process taken in turn with the candidate's, where there was one)."""

    timing: JudgedTiming
    kept: KeptSamples
    beside: JudgedTiming | None = None


class Alongside(Protocol):
    """Another process timed in the same run, a sample of its own beside each of the
    candidate's (:class:`judge.beside.Beside`: the reference's)."""

    def warm_up(self, quick: bool, deadline: float, cores: list[int] | None) -> None: ...

    def settle(self, deadline: float) -> None:
        """Before a sample of the candidate's: until neither side's work runs."""
        ...

    def sample(self, values: list[Any], index: int, deadline: float) -> None: ...

    def null(self, values: list[Any], index: int, deadline: float) -> None: ...

    def timing(self, candidate: JudgedTiming) -> JudgedTiming:
        """Its timing, taken under the candidate's run's rule and inputs."""
        ...


def time_run(clock: Clock, values_for: Callable[[int], list[Any]],
             input_prints: Callable[[int, list[Any]], list[list[int]]],
             num_trials: int | None, calibration: list[float], reference_ms: float,
             extras: bool = True, cores: list[int] | None = None,
             beside: Alongside | None = None) -> CandidateRun:
    """Warm-up, samples on the judge's clock with null calls between them, the kernel's
    process's own figures and its trace of one more call beside; the raw run.
    ``values_for(i)``: sample ``i``'s inputs; ``input_prints(i, values)``: their fingerprints,
    asked only for the samples the audit keeps; ``reference_ms``: the reference's figure,
    which sizes the audit; ``cores``: where the partner holds its threads from its warm-up to
    its extras; ``beside``: the reference's process, timed in turn with the candidate's."""
    partner, now = clock.partner, time.perf_counter
    began = now()
    deadline = began + READING_BUDGET_S
    spent = {"inputs": 0.0, "samples": 0.0, "nulls": 0.0, "keep": 0.0}
    if beside is not None:
        beside.warm_up(few(num_trials), deadline, cores)
    warm = partner.warm_up(few(num_trials), deadline, cores, shares_cores=beside is not None)
    warm_wall = (now() - began) * 1e3
    kept = KeptSamples(kept_places(clock.holder, reference_ms))
    trusted: list[float] = []
    nets: list[float] = []  # the samples so far less the calibration, kept sorted (FAST_SHARE)
    fresh = 0
    null_ms = median(calibration)
    cut: list[str] = []
    device = clock.arena.layout.where == "device"
    rule = StoppingRule.for_request(num_trials, PRECISION_FLOOR_MS if device else
                                    PRECISION_FLOOR_CPU_MS)
    # (on the CPU the hand-over's cost moves with the host's scheduling by tens of
    # microseconds: no run would ever know it to the floor, so the CPU's runs keep the
    # samples' own precision and a null call every NULL_EVERY-th sample)
    between = NullCalls(calibration, dense=rule.adaptive and device)
    nulls = between.figures

    def take(i: int) -> float:
        nonlocal fresh
        t0 = now()
        values = values_for(i)
        fresh += 1
        t1 = now()
        interval = _sample(clock, beside, values, i, deadline)
        t2 = now()
        net = max(0.0, interval - null_ms)
        fast = len(nets) >= FAST_AFTER and net < FAST_SHARE * median(nets)
        trusted.append(interval)
        insort(nets, net)
        # (the judge's own input values: the kernel's process only ever had the arena's copy)
        kept.offer(i, clock.holder, lambda: input_prints(i, values), fast)
        t3 = now()
        if between.due(i, nets):
            # (the sample's inputs written again: the same copy, nothing new to the kernel)
            ms, _ = clock.call(values, CallPurpose.CALIBRATE, i,
                               min(deadline, now() + CALL_BUDGET_S))
            nulls.append(ms)
            if beside is not None:
                beside.null(values, i, min(deadline, now() + CALL_BUDGET_S))
        t4 = now()
        spent["inputs"] += (t1 - t0) * 1e3
        spent["samples"] += (t2 - t1) * 1e3
        spent["keep"] += (t3 - t2) * 1e3
        spent["nulls"] += (t4 - t3) * 1e3
        return net

    def stop_early(samples: list[float], elapsed_s: float) -> str | None:
        rise = slowing(samples)
        if rise is not None:
            cut.append(f"each call ran slower than the last: the last quarter of the "
                       f"{len(samples)} samples took {rise:.3g}x the first's (the kernel "
                       "leaks memory, streams or handles between calls, or its work grows)")
            return "slowing"
        if elapsed_s >= SAMPLING_SHARE * READING_BUDGET_S or now() >= deadline:
            cut.append(f"the timing's budget of {READING_BUDGET_S:g} s ran out after "
                       f"{len(samples)} samples")
            return "budget"
        return None

    began_sampling = now()
    try:
        net, stopped_by = sample_until(take, now, rule, give_up=stop_early,
                                       offset_error=between.error if between.dense else None)
    except CallOverran as exc:
        if not trusted:
            raise
        stopped_by = "budget"
        cut.append(f"a call overran its budget of {CALL_BUDGET_S:g} s ({exc}) after "
                   f"{len(trusted)} samples")
        net = [max(0.0, t - null_ms) for t in trusted]
    sampling_ms = (now() - began_sampling) * 1e3
    # a short run gets its null calls after the samples: the hand-over's cost in the state
    # the samples met (a fresh process's first calls, the calibration's, can run slower)
    t0 = now()
    for i in range(len(nulls), NULLS_AT_LEAST):
        if now() >= deadline or cut:
            break
        ms, _ = clock.call(values_for(0), CallPurpose.CALIBRATE, i,
                           min(deadline, now() + CALL_BUDGET_S))
        nulls.append(ms)
        if beside is not None:
            beside.null(values_for(0), i, min(deadline, now() + CALL_BUDGET_S))
    spent["nulls"] += (now() - t0) * 1e3
    # the run's end: the kernel's process puts its module's state back as the trials left it
    # (for the recheck), and takes its own figures where there is time for them; it traces one
    # more call (the result's launch provenance) where there is time for a few
    figures = extras and not cut and not few(num_trials) and now() < deadline - EXTRAS_RESERVE_S
    trace = extras and not cut and \
        now() + TRACE_CALLS * median(net) / 1e3 < deadline - EXTRAS_RESERVE_S
    t0 = now()
    own = partner.extras(
        Extras(median_ms=median(net), samples=len(net), num_trials=num_trials, figures=figures,
               trace=trace),
        max(deadline, now() + EXTRAS_RESERVE_S))
    spent["extras"] = (now() - t0) * 1e3
    report: TimingReport | None = own.report if figures else None
    timing = JudgedTiming(
        clock="cuda_events" if device else "perf_counter",
        trusted_ms=trusted, calibration_ms=calibration, null_ms=nulls,
        # the warm-up's wall time as the judge saw it; its call count is the kernel's word
        warmup_calls=warm.calls, warmup_ms=warm_wall,
        warmup_reason=quick_warm_up_reason(num_trials),
        sample_rule="adaptive" if rule.adaptive else "fixed", stopped_by=stopped_by,
        sampling_ms=sampling_ms, fresh_inputs=fresh,
        spent_ms={"warm_up": warm_wall, **spent},
        released_early=clock.hand_over.released_early,
        cut_short="; ".join(cut) or None, kernel_reported=report,
        kernel_trace=own.trace if trace else None, interleaved=beside is not None)
    return CandidateRun(timing, kept, beside.timing(timing) if beside is not None else None)


def _sample(clock: Clock, beside: Alongside | None, values: list[Any], i: int,
            deadline: float) -> float:
    """The judge's interval of the candidate's sample ``i``; with ``beside``, the other side's
    sample ``i`` taken in turn (first on even samples, second on odd ones), each once the
    device is quiet."""
    def budget() -> float:
        return min(deadline, time.perf_counter() + CALL_BUDGET_S)

    if beside is not None and i % 2 == 0:
        beside.sample(values, i, budget())
    if beside is not None:
        beside.settle(budget())
    interval, _ = clock.call(values, CallPurpose.SAMPLE, i, budget())
    if beside is not None and i % 2 == 1:
        beside.sample(values, i, budget())
    return interval


EXTRAS_RESERVE_S = 5.0  # the kernel's process's own figures only where this much budget is left
TRACE_CALLS = 2  # the traced call is asked for where the budget holds this many calls beyond
# An adaptive run stops once its median's standard error is within 0.5% of itself
# (shared.stopping), or within these: a few-microsecond kernel's figure needs no nanoseconds
PRECISION_FLOOR_MS = 0.0001
PRECISION_FLOOR_CPU_MS = 0.001
