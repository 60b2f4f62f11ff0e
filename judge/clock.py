"""The judge's clock on timed samples: the reference's and the candidate's, by one procedure.

For each timed sample the judge, in its own process:

1. makes the sample's inputs from the secret (:class:`harness.inputs.SampleInputs`), before
   its clock runs: nothing of them is in the arena yet;
2. hands the call over (:mod:`harness.handover`, :mod:`judge.handover`): its clock starts,
   the inputs are written into the arena's input slots (and the L2 flushed), the kernel's
   process runs the call and copies its outputs into the output slots, the judge copies those
   into its own memory, and only then the clock stops. On a GPU both processes' parts run on
   the device in that order, behind a gate the judge opens once the kernel's process has
   enqueued its part, so the interval holds GPU work only (two CUDA events on the judge's
   stream), and the next hand-over is begun while this one runs; on the CPU the judge asks
   for the call once the inputs are in and copies the outputs once it is answered.

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

from harness.timer import few, median, quick_warm_up_reason
from judge.handover import Clock, Lookahead
from judge.partner import CallOverran
from shared.protocol import CallPurpose, Extras, JudgedTiming, TimingReport
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


def calibrate(clock: Clock, values: list[Any]) -> list[float]:
    """The judge's interval for the harness's null call, ms (no kernel code loaded yet),
    taken as the samples will be: each call begun while the one before runs, where the clock
    allows it (:class:`judge.handover.Lookahead`)."""
    deadline = time.perf_counter() + READING_BUDGET_S
    rounds: list[list[float]] = []
    index = 0
    for round_ in range(CALIBRATION_ROUNDS):
        if round_:
            time.sleep(CALIBRATION_PAUSE_S)
        count = (CALIBRATION_WARMUP if not round_ else 0) + CALIBRATION_CALLS
        calls = [(("null", index + i), values, CallPurpose.CALIBRATE, index + i)
                 for i in range(count)]
        index += count
        intervals = Lookahead(clock).series(calls, deadline)
        rounds.append(intervals if round_ else intervals[CALIBRATION_WARMUP:])
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
             beside: Alongside | None = None, values_apart: bool = True) -> CandidateRun:
    """Warm-up, samples on the judge's clock with null calls between them, the kernel's
    process's own figures and its trace of one more call beside; the raw run.
    ``values_for(i)``: sample ``i``'s inputs; ``input_prints(i, values)``: their fingerprints,
    asked only for the samples the audit keeps; ``reference_ms``: the reference's figure,
    which sizes the audit; ``cores``: where the partner holds its threads from its warm-up to
    its extras; ``beside``: the reference's process, timed in turn with the candidate's;
    ``values_apart``: whether sample i's values stay as they are once sample i + 1's are made
    (else no sample is begun before the last one's figure and outputs are taken)."""
    partner, now = clock.partner, time.perf_counter
    began = now()
    deadline = began + READING_BUDGET_S
    if beside is not None:
        beside.warm_up(few(num_trials), deadline, cores)
    warm = partner.warm_up(few(num_trials), deadline, cores, shares_cores=beside is not None)
    warm_wall = (now() - began) * 1e3
    run = _Sampling(clock, values_for, input_prints, num_trials, calibration,
                    KeptSamples(kept_places(clock.holder, reference_ms)), deadline, beside,
                    values_apart)
    began_sampling = now()
    try:
        net, stopped_by = sample_until(
            run.take, now, run.rule, give_up=run.stop_early,
            offset_error=run.between.error if run.between.dense else None)
    except CallOverran as exc:
        if not run.trusted:
            raise
        stopped_by = "budget"
        run.overran(exc)
        net = [max(0.0, t - run.null_ms) for t in run.trusted]
    sampling_ms = (now() - began_sampling) * 1e3
    run.end()
    # the run's end: the kernel's process puts its module's state back as the trials left it
    # (for the recheck), and takes its own figures where there is time for them; it traces one
    # more call (the result's launch provenance) where there is time for a few
    cut = run.cut
    figures = extras and not cut and not few(num_trials) and now() < deadline - EXTRAS_RESERVE_S
    trace = extras and not cut and \
        now() + TRACE_CALLS * median(net) / 1e3 < deadline - EXTRAS_RESERVE_S
    t0 = now()
    own = partner.extras(
        Extras(median_ms=median(net), samples=len(net), num_trials=num_trials, figures=figures,
               trace=trace),
        max(deadline, now() + EXTRAS_RESERVE_S))
    run.spent["extras"] = (now() - t0) * 1e3
    report: TimingReport | None = own.report if figures else None
    timing = JudgedTiming(
        clock="cuda_events" if run.device else "perf_counter",
        trusted_ms=run.trusted, calibration_ms=calibration, null_ms=run.nulls,
        # the warm-up's wall time as the judge saw it; its call count is the kernel's word
        warmup_calls=warm.calls, warmup_ms=warm_wall,
        warmup_reason=quick_warm_up_reason(num_trials),
        sample_rule="adaptive" if run.rule.adaptive else "fixed", stopped_by=stopped_by,
        sampling_ms=sampling_ms, fresh_inputs=run.fresh,
        spent_ms={"warm_up": warm_wall, **run.spent},
        released_early=clock.hand_over.released_early,
        cut_short="; ".join(cut) or None, kernel_reported=report,
        kernel_trace=own.trace if trace else None, interleaved=beside is not None)
    return CandidateRun(timing, run.kept, beside.timing(timing) if beside is not None else None)


class _Sampling:
    """The samples of one timing run and the null calls between them (:func:`time_run`).
    Each hand-over begins while the one before runs where the clock allows it
    (:class:`judge.handover.Lookahead`); not with a process beside, whose samples take turns
    with the candidate's once the device is quiet."""

    def __init__(self, clock: Clock, values_for: Callable[[int], list[Any]],
                 input_prints: Callable[[int, list[Any]], list[list[int]]],
                 num_trials: int | None, calibration: list[float], kept: KeptSamples,
                 deadline: float, beside: Alongside | None, values_apart: bool) -> None:
        self.clock, self.values_for, self.input_prints = clock, values_for, input_prints
        self.values_apart = values_apart
        self.kept, self.deadline, self.beside = kept, deadline, beside
        self.now = time.perf_counter
        self.spent = {"inputs": 0.0, "samples": 0.0, "nulls": 0.0, "keep": 0.0}
        self.trusted: list[float] = []
        self.nets: list[float] = []  # the samples so far less the calibration, sorted (FAST_SHARE)
        self.fresh = 0
        self.null_ms = median(calibration)
        self.cut: list[str] = []
        self.device = clock.arena.layout.where == "device"
        self.rule = StoppingRule.for_request(num_trials, PRECISION_FLOOR_MS if self.device else
                                             PRECISION_FLOOR_CPU_MS)
        # (on the CPU the hand-over's cost moves with the host's scheduling by tens of
        # microseconds: no run would ever know it to the floor, so the CPU's runs keep the
        # samples' own precision and a null call every NULL_EVERY-th sample)
        self.between = NullCalls(calibration, dense=self.rule.adaptive and self.device)
        self.nulls = self.between.figures
        self.ahead = Lookahead(clock, on=beside is None)

    def budget(self) -> float:
        return min(self.deadline, self.now() + CALL_BUDGET_S)

    def made(self, i: int) -> list[Any]:
        t0 = self.now()
        values = self.values_for(i)
        self.fresh += 1
        self.spent["inputs"] += (self.now() - t0) * 1e3
        return values

    def next_sample_ahead(self, i: int) -> None:
        """Sample ``i + 1`` begun now, where the clock allows it (a run that stops after
        sample ``i`` lets it end unused: :meth:`end`). Not where sample ``i + 1``'s values
        are made in sample ``i``'s tensors: the fingerprints of a sample the audit keeps are
        taken once its figure is in."""
        if i < self.rule.max_samples - 1 and self.ahead.open and self.values_apart:
            self.ahead.begin(("sample", i + 1), self.made(i + 1), CallPurpose.SAMPLE, i + 1,
                             self.budget())

    def take(self, i: int) -> float:
        """Sample ``i``, and the null call after it where one is due: its net figure."""
        now, spent, ahead = self.now, self.spent, self.ahead
        t0, inputs0 = now(), spent["inputs"]
        sample = ("sample", i)
        begun = ahead.values(sample)
        values = begun if begun is not None else self.made(i)
        # decided before the sample's own figure is in: both may then be begun ahead
        null_after = self.between.due(i, self.nets)
        if self.beside is not None:
            interval = _sample(self.clock, self.beside, values, i, self.deadline)
        else:
            ahead.begin(sample, values, CallPurpose.SAMPLE, i, self.budget())
            if null_after:
                # (the sample's inputs written again: the same copy, nothing new to the kernel)
                ahead.begin(("null", i), values, CallPurpose.CALIBRATE, i, self.budget())
            else:
                self.next_sample_ahead(i)
            interval, _ = ahead.interval(sample, values, CallPurpose.SAMPLE, i, self.budget())
        t1 = now()
        net = max(0.0, interval - self.null_ms)
        fast = len(self.nets) >= FAST_AFTER and net < FAST_SHARE * median(self.nets)
        self.trusted.append(interval)
        insort(self.nets, net)
        # (the judge's own input values: the kernel's process only ever had the arena's copy)
        self.kept.offer(i, self.clock.holder, lambda: self.input_prints(i, values), fast)
        t2, inputs1 = now(), spent["inputs"]
        if null_after:
            if self.beside is None:
                self.next_sample_ahead(i)
            ms, _ = ahead.interval(("null", i), values, CallPurpose.CALIBRATE, i, self.budget())
            self.nulls.append(ms)
            if self.beside is not None:
                self.beside.null(values, i, self.budget())
        t3 = now()
        spent["samples"] += (t1 - t0) * 1e3 - (inputs1 - inputs0)
        spent["keep"] += (t2 - t1) * 1e3
        spent["nulls"] += (t3 - t2) * 1e3 - (spent["inputs"] - inputs1)
        return net

    def stop_early(self, samples: list[float], elapsed_s: float) -> str | None:
        rise = slowing(samples)
        if rise is not None:
            self.cut.append(f"each call ran slower than the last: the last quarter of the "
                            f"{len(samples)} samples took {rise:.3g}x the first's (the kernel "
                            "leaks memory, streams or handles between calls, or its work grows)")
            return "slowing"
        if elapsed_s >= SAMPLING_SHARE * READING_BUDGET_S or self.now() >= self.deadline:
            self.cut.append(f"the timing's budget of {READING_BUDGET_S:g} s ran out after "
                            f"{len(samples)} samples")
            return "budget"
        return None

    def overran(self, exc: CallOverran) -> None:
        self.cut.append(f"a call overran its budget of {CALL_BUDGET_S:g} s ({exc}) after "
                        f"{len(self.trusted)} samples")

    def end(self) -> None:
        """After the samples: a sample begun ahead of the stop ends unused, and a short run
        gets its null calls, the hand-over's cost in the state the samples met (a fresh
        process's first calls, the calibration's, can run slower)."""
        try:
            self.ahead.drop(self.budget())
        except CallOverran as exc:
            self.overran(exc)
        t0 = self.now()
        missing = range(len(self.nulls), NULLS_AT_LEAST) \
            if not self.cut and t0 < self.deadline else range(0)
        if missing:
            first = self.values_for(0)
            if self.beside is None:
                self.nulls += self.ahead.series(
                    [(("null", -1 - i), first, CallPurpose.CALIBRATE, i) for i in missing],
                    self.budget())
            else:
                for i in missing:
                    if self.now() >= self.deadline:
                        break
                    ms, _ = self.clock.call(first, CallPurpose.CALIBRATE, i, self.budget())
                    self.nulls.append(ms)
                    self.beside.null(first, i, self.budget())
        self.spent["nulls"] += (self.now() - t0) * 1e3


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
