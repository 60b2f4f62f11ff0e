"""Where a job is and where its time went: its stage clock, its deadline, its current step.

A crash or a timeout is reported by the step the job was at (:class:`Side` and
:class:`Stage`, never parsed back out of text); the deadline runs from when the job got its
device, and time it waits at its GPU's gate behind other jobs is not counted against it.
"""

from __future__ import annotations

import time
from enum import Enum


class Side(str, Enum):
    """Whose code a step runs."""

    REFERENCE = "ref"
    KERNEL = "custom"  # the kernel under test (a comparison's candidate)
    ALONE = "kernel"  # the kernel of /evaluate or /validate
    BUILD = "build"

    def who(self) -> str:
        return {Side.REFERENCE: "the reference kernel", Side.KERNEL: "the custom kernel",
                Side.ALONE: "the kernel", Side.BUILD: "the build of the kernel"}[self]


class Stage(str, Enum):
    """What a step does (the text reads "<stage> <whose kernel>")."""

    STARTING = "starting"
    BUILDING = "building"
    COMPILING = "compiling"
    RUNNING = "running"
    CALIBRATING = "calibrating the judge's clock beside"
    CHECKING = "checking the output of"
    TIMING = "timing"
    AUDITING = "checking a timed sample of"
    RECHECKING = "rechecking on fresh inputs"

    @property
    def compiled(self) -> bool:
        """Whether the kernel got past compiling when it stopped at this stage."""
        return self not in (Stage.STARTING, Stage.BUILDING, Stage.COMPILING)

    @property
    def lap(self) -> str:
        """The stage of ``stage_timings`` this step's time counts towards."""
        if self in (Stage.STARTING, Stage.BUILDING, Stage.COMPILING):
            return "build" if self == Stage.BUILDING else "compile"
        if self in (Stage.TIMING, Stage.CALIBRATING):
            return "timing"
        if self == Stage.AUDITING:  # the timed samples' check, after the timing
            return "audit"
        return "correctness"


class Clock:
    """Stage timings of one job, in milliseconds."""

    def __init__(self) -> None:
        self.created = time.perf_counter()
        self.stages: dict[str, float] = {}
        self._mark = self.created

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.stages[stage] = self.stages.get(stage, 0.0) + (now - self._mark) * 1e3
        self._mark = now

    def add(self, stage: str, ms: float) -> None:
        self.stages[stage] = self.stages.get(stage, 0.0) + ms

    def done(self) -> dict[str, float]:
        self.stages["total"] = (time.perf_counter() - self.created) * 1e3
        return {k: round(v, 3) for k, v in self.stages.items()}


class JobStep:
    """Where a job is (so a crash or timeout can say so), and its deadline."""

    def __init__(self) -> None:
        self.side = Side.ALONE
        self.stage = Stage.STARTING
        # server wall (ms) of every worker request, summed per "side.op", with counts: where a
        # stage's time goes (a result's metadata.worker_calls)
        self.calls: dict[str, dict[str, float]] = {}
        self.deadline: float | None = None  # time.monotonic() when the job times out
        self.gate_waiting_since: float | None = None
        self.gate_waited_s = 0.0
        self.gate_allowance_s = 0.0  # how much waiting may move the deadline, in all

    def start(self, timeout: float) -> None:
        """The job has its device: its timeout runs from now; waiting behind other jobs at
        the GPU's gate may move it by as much again."""
        self.deadline = time.monotonic() + max(1.0, timeout)
        self.gate_allowance_s = float(timeout)

    def gate_wait_began(self) -> None:
        self.gate_waiting_since = time.monotonic()

    def gate_wait_ended(self) -> None:
        """Time waited for other jobs at the gate moves the deadline (up to the allowance)."""
        if self.gate_waiting_since is None:
            return
        waited = time.monotonic() - self.gate_waiting_since
        self.gate_waiting_since = None
        moved = min(waited, max(0.0, self.gate_allowance_s - self.gate_waited_s))
        self.gate_waited_s += waited
        if self.deadline is not None:
            self.deadline += moved

    def time_left(self) -> float:
        """Seconds until the deadline, counting a wait at the gate in progress as not the
        job's (within the allowance)."""
        assert self.deadline is not None
        now = time.monotonic()
        extra = 0.0
        if self.gate_waiting_since is not None:
            extra = min(now - self.gate_waiting_since,
                        max(0.0, self.gate_allowance_s - self.gate_waited_s))
        return self.deadline + extra - now

    def set(self, side: Side, stage: Stage) -> None:
        self.side, self.stage = side, stage

    def called(self, side: Side, op: str, ms: float) -> None:
        """A request to ``side``'s worker took ``ms`` (``<side>.<op>`` in the summary)."""
        self._count(f"{side.value}.{op}", ms)

    def spent(self, what: str, ms: float) -> None:
        """The server's own time around a request (``server.<what>`` in the summary)."""
        self._count(f"server.{what}", ms)

    def _count(self, key: str, ms: float) -> None:
        entry = self.calls.setdefault(key, {"calls": 0, "ms": 0.0})
        entry["calls"] += 1
        entry["ms"] += ms

    def summary(self) -> dict[str, dict[str, float]]:
        return {k: {"calls": int(v["calls"]), "ms": round(v["ms"], 3)}
                for k, v in self.calls.items()}

    def describe(self) -> str:
        return f"{self.stage.value} {self.side.who()}"
