"""The reference's own process paired beside the candidate's, their samples taken in turn.

A call that waits for the device from inside (a host copy, ``.item()``, more launches than the
driver queues: cuDNN's RNNs, models of thousands of small kernels) is timed with its host's
time, and a host's speed moves from one second to the next: two readings of identical code
taken one after the other disagree by far more than two taken in turn
(``bench/host_bound_drift.py``, docs/ENGINE.md "Host-bound calls"). Where the reference's own
reading is such a reading, the server pairs a fresh process of the reference with the judge
beside the candidate's (``Pair.beside``), and the candidate's timing run takes each sample of
both in turn (:func:`judge.clock.time_run`): the two figures meet the same host, and the
speedup is the median of their per-sample ratios (:class:`profiling.integrity.PairedRatios`).

The two processes share the timing core and the device. Neither polls its channel between
calls (``WarmUp.shares_cores``); the candidate's runs at idle priority on that core, with all
it starts, from before its code is loaded (``Pair.yield_cores``); and each sample waits until
the device runs nothing of either side's (:class:`DeviceQuiet`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.arena import Arena
from judge.clock import calibrate
from judge.errors import ReferenceFailed
from judge.handover import Clock, hand_over_for
from judge.partner import CallOverran, Partner, PartnerFailure, PartnerLost
from shared.models import Outcome
from shared.protocol import CallPurpose, Failure, JudgedTiming, MapArena, WarmedUp

BESIDE_CUT = "taken beside the candidate's timing run, which ended early"
# Before each sample of a run taken in turn, on a GPU, the judge waits until a kernel of its
# own runs within QUIET_PROBE_MS of its launch (at most QUIET_WAIT_S a sample): work one
# side's process left running past its call's end (another stream, another context) would
# otherwise share the device with the other side's sample, time-sliced.
QUIET_PROBE_MS = 0.25
QUIET_WAIT_S = 1.0


class DeviceQuiet:
    """The judge's probe of the device between samples (:data:`QUIET_PROBE_MS`)."""

    def __init__(self) -> None:
        import torch

        self._word = torch.zeros(1, device="cuda")
        self._stream = torch.cuda.current_stream()
        self.waited_ms = 0.0  # the run's waits for the device together

    def wait(self, deadline: float) -> None:
        now = time.perf_counter
        began = now()
        until = min(deadline, began + QUIET_WAIT_S)
        while True:
            t0 = now()
            self._word.add_(1.0)
            self._stream.synchronize()
            if (now() - t0) * 1e3 <= QUIET_PROBE_MS or now() >= until:
                break
        self.waited_ms += (now() - began) * 1e3


class Beside:
    """The reference's own process, paired beside the candidate's (:mod:`judge.beside`): each
    timed sample of the candidate's run takes one of the reference's in turn, on the same
    inputs, the two in alternate order (reference first on even samples, the candidate first
    on odd ones), and a null call of each after every NULL_EVERY-th. Its outputs are neither
    kept nor checked: the reference's process runs the reference's own code. Whatever goes
    wrong on its side is the reference's failure (:class:`ReferenceFailed`)."""

    def __init__(self, clock: Clock, calibration: list[float],
                 quiet: DeviceQuiet | None = None) -> None:
        self.clock, self.calibration, self.quiet = clock, calibration, quiet
        self.trusted: list[float] = []
        self.nulls: list[float] = []
        self.warm = WarmedUp(calls=0, ms=0.0)
        self.warm_ms = 0.0

    def warm_up(self, quick: bool, deadline: float, cores: list[int] | None) -> None:
        began = time.perf_counter()
        self.warm = theirs(lambda: self.clock.partner.warm_up(quick, deadline, cores,
                                                              shares_cores=True))
        self.warm_ms = (time.perf_counter() - began) * 1e3

    def settle(self, deadline: float) -> None:
        """Until the device runs no work of either side's (:class:`DeviceQuiet`; the CPU's
        hand-over has no device to wait for)."""
        if self.quiet is not None:
            self.quiet.wait(deadline)

    def sample(self, values: list[Any], index: int, deadline: float) -> None:
        self.settle(deadline)
        ms, _ = theirs(lambda: self.clock.call(values, CallPurpose.SAMPLE, index, deadline))
        self.trusted.append(ms)

    def null(self, values: list[Any], index: int, deadline: float) -> None:
        ms, _ = theirs(lambda: self.clock.call(values, CallPurpose.CALIBRATE, index, deadline))
        self.nulls.append(ms)

    def timing(self, candidate: JudgedTiming) -> JudgedTiming:
        """The reference's timing, taken under the candidate's run's rule and inputs."""
        return candidate.model_copy(update={
            "trusted_ms": self.trusted, "calibration_ms": self.calibration,
            "null_ms": self.nulls, "warmup_calls": self.warm.calls, "warmup_ms": self.warm_ms,
            "spent_ms": {"device_quiet": self.quiet.waited_ms} if self.quiet else {},
            "released_early": self.clock.hand_over.released_early,
            "cut_short": BESIDE_CUT if candidate.cut_short else None,
            "kernel_reported": None, "kernel_trace": None, "interleaved": True})


def theirs(step: Callable[[], Any]) -> Any:
    """``step``, a request to the reference's process paired beside: its failure, overrun or
    loss raised as the reference's (:class:`ReferenceFailed`), never the candidate's."""
    try:
        return step()
    except (CallOverran, PartnerFailure, PartnerLost) as exc:
        failure = exc.failure if isinstance(exc, PartnerFailure) else Failure(
            outcome=Outcome.RUNTIME_ERROR,
            message=f"the reference's process, timed beside the candidate's, failed: {exc}")
        raise ReferenceFailed(failure) from exc


@dataclass
class PairedBeside:
    """The judge's side of the pairing beside: the reference's process's channel, then (once
    calibrated) its own arena, clock and null call."""

    partner: Partner
    arena: Arena | None = None
    clock: Clock | None = None
    calibration: list[float] = field(default_factory=list)

    def calibrate(self, arena: Arena, timer: Any, values: list[Any]) -> list[float]:
        """Map ``arena`` (new memory, never the candidate's: it will hold the reference's
        outputs) with the partner and measure its null call."""
        self.arena = arena

        def mapped() -> list[float]:
            self.partner.map_arena(MapArena(layout=arena.layout), arena.fd)
            self.clock = Clock(self.partner, arena,
                               hand_over_for(self.partner, arena, timer, values))
            return calibrate(self.clock, values)

        self.calibration = theirs(mapped)
        return self.calibration

    def run(self) -> Beside:
        """This partner's side of the next timing run."""
        if self.clock is None or not self.calibration:
            raise ValueError("the partner paired beside is not calibrated")
        on_device = self.arena is not None and self.arena.layout.where == "device"
        return Beside(self.clock, self.calibration, DeviceQuiet() if on_device else None)

    def close(self) -> None:
        self.partner.close()
        if self.arena is not None:
            self.arena.close()
