"""The judge's operations: the reference, its timing, and the candidate's trials, timing,
robustness cases and audit, driven over the pair channel.

One judge serves one pairing at a time (a /compare, or each candidate of a batch in turn);
what it learned of the reference (its compiled module, trial 0's inputs and outputs) serves
every pairing, and the reference's module state is put back at each pairing's start, so a
candidate meets the same reference whatever ran before it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch

from compilation.base import Arguments, CompileContext, ExecutableKernel
from harness import device_memory
from harness.arena import Arena, ArenaError, DoesNotFit, plan
from harness.failures import classify, out_of_memory, runtime_message
from harness.inputs import SampleInputs
from harness.process import work_root
from harness.tensors import (
    Staged,
    fingerprints,
    resolve,
    stage_fingerprints,
    tensor_bytes,
    tensors_of,
)
from harness.timer import Timer
from judge import audit as audits
from judge import robustness
from judge.audit import copied_values
from judge.beside import PairedBeside
from judge.clock import CandidateRun, calibrate, time_run
from judge.errors import ReferenceFailed
from judge.flops import count_work
from judge.handover import Clock, hand_over_for
from judge.judging import Laps, Prepared, Trial0
from judge.partner import CallOverran, Partner, PartnerFailure, PartnerLost
from judge.trials import one_trial
from shared.channel import PAIR_SPIN_S, Channel
from shared.models import Outcome, WorkerJob
from shared.protocol import (
    ArenaLayout,
    Audit,
    Calibrate,
    Calibrated,
    Done,
    Failure,
    Incorrect,
    KernelTimed,
    Load,
    Loaded,
    MapArena,
    Message,
    Pair,
    PartnerFailed,
    PartnerGone,
    PrepareSamples,
    Resources,
    Robustness,
    TimeKernel,
    Trials,
    TrialsPassed,
    Unpair,
)
from shared.stopping import MIN_SAMPLES


class JudgeSession:
    def __init__(self, device: str, timer: Timer) -> None:
        self.device = device
        self.timer = timer
        self.job: WorkerJob | None = None  # the job that loaded the reference
        self.comparison: WorkerJob | None = None  # the job of the pairing now (its tolerances)
        self.exe: ExecutableKernel | None = None
        self.saved_state: dict[str, torch.Tensor] | None = None
        self.trial0: Trial0 | None = None
        self.partner: Partner | None = None
        self.secret: int | None = None
        self.arena: Arena | None = None
        self.pairing = 0  # the server's number of the pairing now (Pair.pairing)
        # arenas of earlier pairings, by pairing number, kept for a later one (Calibrate.free)
        self.parked: list[tuple[int, Arena]] = []
        self.clock: Clock | None = None  # the pairing's clock, once its arena is mapped
        self.beside: PairedBeside | None = None  # the reference's process beside (Pair.beside)
        self.calibration: list[float] = []  # the pairing's null calls (ms)
        # the last null calls measured by a Calibrate, with their arena's layout: they outlive
        # their pairing, for the next pairings the server says they may serve (Calibrate.kept)
        self.kept: tuple[ArenaLayout, list[float]] | None = None
        self.run: CandidateRun | None = None
        self.prepared: Prepared | None = None  # the first timed samples' inputs, made ahead
        # those a pairing's first reading was timed on, kept for the same job's next pairing
        # (Unpair.keep_samples): its candidate's first reading is timed on the same inputs
        self.carried: tuple[str, Prepared] | None = None
        self.readings = 0  # timing runs of this pairing so far
        self.run_inputs: SampleInputs | None = None  # what made the last run's inputs
        self.peak_trial_memory = 0
        self.spent = Laps()  # where the current request's time goes (diagnostics)

    # ---- helpers

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        """Factory functions make tensors on the job's device (get_inputs, model weights)."""
        return torch.device(self.device) if self.device == "cuda" else contextlib.nullcontext()

    def kernel(self) -> ExecutableKernel:
        assert self.exe is not None, "the reference is not loaded"
        return self.exe

    def make_inputs(self, trial: int, salt: int) -> Arguments:
        try:
            with self.scope():
                return self.kernel().make_inputs(trial, salt)
        except Exception as exc:
            raise ReferenceFailed(classify(exc, self.device, "making the inputs: ")) from exc

    def run_reference(self, args: Arguments, wait: bool = True) -> list[torch.Tensor]:
        """The reference's outputs on ``args``; ``wait=False`` leaves its GPU work running
        (the next :meth:`resolved` read waits for it, and reports its faults as the
        reference's)."""
        try:
            outputs = self.kernel().run(args)
            if wait:
                self.timer.sync()
        except Exception as exc:
            raise ReferenceFailed(classify(exc, self.device)) from exc
        return [t.detach() for t in outputs]

    def resolved(self, *staged: Staged[Any]) -> list[Any]:
        """:func:`harness.tensors.resolve` of checks on the reference's work: a fault the read
        brings up (the reference's kernels ran asynchronously) is the reference's."""
        try:
            out = resolve(*staged)
            self.timer.sync()  # (work on other streams: the read waited for its own only)
            return out
        except Exception as exc:
            raise ReferenceFailed(classify(exc, self.device)) from exc

    def sample_values(self, fresh: SampleInputs, i: int) -> list[Any]:
        """Timed sample ``i``'s inputs, made from the secret."""
        try:
            return fresh.values(i)
        except Exception as exc:
            raise ReferenceFailed(classify(exc, self.device,
                                           "making the timing inputs: ")) from exc

    def resources(self) -> Resources:
        return device_memory.resources(self.device)

    def first_trial(self) -> Trial0:
        """Trial 0 (the request's own seeds), run once per judge: the reference's outputs,
        whether it wrote its inputs, and the inputs themselves while they are small."""
        if self.trial0 is None:
            args = self.make_inputs(0, 0)
            values = _read_values(args)
            prints = fingerprints(tensors_of(values))
            outputs = self.run_reference(args)
            mutates = fingerprints(tensors_of(values)) != prints
            size = tensor_bytes(values)
            keep = None if mutates or size > KEEP_TRIAL0_BYTES else values
            ref = self.job.ref_kernel if self.job is not None else None
            work = count_work(self.kernel(), args, outputs,
                              writes_args=mutates or bool(args.output_tensors()),
                              kernel_type=ref.kernel_type.value if ref else "torch",
                              device=self.device, sync=self.timer.sync)
            self.trial0 = Trial0(outputs, mutates, prints, size, tensor_bytes(outputs), keep,
                                 work)
            self.restore_state()
        return self.trial0

    def trial0_values(self) -> list[Any]:
        """Trial 0's inputs as made (made again when they were too large to keep)."""
        first = self.first_trial()
        if first.values is not None:
            return first.values
        return _read_values(self.make_inputs(0, 0))

    def module_buffers(self) -> dict[str, torch.Tensor] | None:
        fn = getattr(self.kernel(), "fn", None)
        if not isinstance(fn, torch.nn.Module):
            return None
        return dict(fn.named_buffers())

    def restore_state(self) -> None:
        """Put the reference's buffers (BatchNorm's running statistics) back as loaded."""
        buffers = self.module_buffers()
        if not buffers or not self.saved_state:
            return
        for name, value in self.saved_state.items():
            if name in buffers and buffers[name].shape == value.shape:
                buffers[name].copy_(value)

    @contextlib.contextmanager
    def partnered(self, during: str) -> Iterator[None]:
        """Partner trouble as the replies that say so (raised as :class:`_Answer`)."""
        try:
            yield
        except PartnerFailure as exc:
            raise _Answer(PartnerFailed(failure=exc.failure, during=during)) from exc
        except PartnerLost as exc:
            raise _Answer(PartnerGone(during=during, broke_protocol=exc.broke_protocol)) from exc
        except ReferenceFailed as exc:
            raise _Answer(exc.failure) from exc

    # ---- operations

    def handle(self, message: Message, fds: list[int]) -> Message:
        handler = self.HANDLERS.get(type(message))
        if handler is None:
            raise TypeError(f"a judge does not do {type(message).__name__}")
        try:
            return handler(self, message, fds)
        except _Answer as answer:
            return answer.reply
        except Exception as exc:
            # The judge's own buffers (the outputs it holds, the inputs it makes) for a problem
            # that does not fit beside the other jobs' memory: no fault of the kernel nor of the
            # harness, and the server's memory retry runs the job again on a quiet GPU.
            if not out_of_memory(exc):
                raise
            return Failure(outcome=Outcome.RUNTIME_ERROR, out_of_memory=True, message=(
                f"the judge ran out of GPU memory for this problem's buffers while it did "
                f"{type(message).__name__}: " + runtime_message(exc, self.device)))

    def load(self, message: Load, fds: list[int]) -> Message:
        from compilation.registry import get_backend

        self.job = message.job
        kernel = self.job.ref_kernel
        assert kernel is not None, "a judge needs a reference"
        ctx = CompileContext(device=self.device, work_dir=work_root() / "ref",
                             cache_dir=Path(self.job.cache_dir), role="ref")
        try:
            with self.scope():
                self.exe = get_backend(kernel.kernel_type).compile(kernel, ctx)
        except Exception as exc:  # noqa: BLE001 - compile errors and user code alike
            return classify(exc, self.device)
        buffers = self.module_buffers()
        self.saved_state = {k: v.detach().clone() for k, v in buffers.items()} if buffers else None
        return Loaded(artifacts=dict(self.kernel().artifacts or {}))

    def pair(self, message: Pair, fds: list[int]) -> Message:
        if len(fds) != 1:
            raise ValueError("a pairing needs the descriptor of its channel")
        spin = PAIR_SPIN_S if self.device == "cuda" else 0.0
        if message.beside:  # (beside the candidate's, which is paired first)
            self.paired()
            self.unpair(Unpair(beside=True), [])
            self.beside = PairedBeside(Partner(Channel.from_fd(fds.pop()), spin))
            return Done()
        self.unpair(Unpair(), [])
        if self.carried is not None and (message.job is None
                                         or message.job.job_id != self.carried[0]):
            self.carried = None
        self.partner = Partner(Channel.from_fd(fds.pop()), spin)
        self.secret = message.secret if message.secret is not None else \
            int.from_bytes(os.urandom(8), "little") >> 1
        self.pairing = message.pairing
        self.comparison = message.job or self.job
        self.restore_state()
        return Done()

    def unpair(self, message: Unpair, fds: list[int]) -> Message:
        if self.beside is not None:
            self.beside.close()
            self.beside = None
        if message.beside:
            return Done()
        if self.partner is not None:
            self.partner.close()
        if self.arena is not None:
            self.park(self.arena)
        if message.keep_samples and self.prepared is not None and self.comparison is not None:
            self.carried = (self.comparison.job_id, self.prepared)
        self.partner, self.arena, self.run, self.calibration = None, None, None, []
        self.prepared, self.readings, self.run_inputs, self.clock = None, 0, None, None
        return Done()

    def calibrate(self, message: Calibrate, fds: list[int]) -> Message:
        partner = self.paired()
        with self.partnered("calibrating the judge's clock"):
            values = self.trial0_values()
            if message.beside:
                beside = self.paired_beside()
                arena = self.arranged(self.planned(values))
                return calibrated(arena, beside.calibrate(arena, self.timer, values))
            reused = False
            if self.arena is None:
                layout = self.planned(values)
                kept_arena = self.unparked(layout, message.free)
                reused = kept_arena is not None
                self.arena = kept_arena or self.arranged(layout)
                partner.map_arena(MapArena(layout=self.arena.layout), self.arena.fd)
                self.clock = Clock(partner, self.arena,
                                   hand_over_for(partner, self.arena, self.timer, values))
            assert self.clock is not None
            if message.kept:
                if self.kept is None or self.kept[0] != self.arena.layout:
                    return Calibrated(arena_bytes=self.arena.layout.size,
                                      where=self.arena.layout.where, null_call_ms=[],
                                      arena_reused=reused)
                self.calibration = self.kept[1]
                return calibrated(self.arena, self.calibration, kept=True, reused=reused)
            self.calibration = calibrate(self.clock, values)
            self.kept = (self.arena.layout, self.calibration)
            return calibrated(self.arena, self.calibration, reused=reused)

    def planned(self, values: list[Any]) -> ArenaLayout:
        """The layout of this pairing's arena, from trial 0's inputs and outputs."""
        first = self.first_trial()
        where: Literal["device", "host"] = "device" \
            if self.device == "cuda" and Arena.can_share_device(self.device) else "host"
        try:
            return plan(values, first.outputs, where)
        except ArenaError as exc:
            raise ReferenceFailed(classify(ValueError(str(exc)), "cpu")) from exc

    def arranged(self, layout: ArenaLayout) -> Arena:
        """New memory for this pairing's arena (the kept arenas let go first where it does
        not fit beside them: they never make a problem fail for want of memory)."""
        try:
            try:
                return Arena.create(layout, self.device)
            except DoesNotFit:
                if not self.parked:
                    raise
                for _, arena in self.parked:
                    arena.close()
                self.parked = []
                return Arena.create(layout, self.device)
        except DoesNotFit as exc:
            raise ReferenceFailed(classify(MemoryError(str(exc)), "cpu")) from exc
        except ArenaError as exc:
            raise ReferenceFailed(classify(ValueError(str(exc)), "cpu")) from exc

    def park(self, arena: Arena) -> None:
        """Keep the arena of the pairing that ends, for a later pairing of the same layout
        once the server says nothing maps it any more (:meth:`unparked`); a large one, or one
        of a pairing the server did not number, is let go."""
        if self.pairing <= 0 or arena.layout.size > PARK_BYTES:
            arena.close()
            return
        self.parked.append((self.pairing, arena))
        while len(self.parked) > PARKED_MAX:
            self.parked.pop(0)[1].close()

    def unparked(self, layout: ArenaLayout, free: list[int]) -> Arena | None:
        """A kept arena of ``layout`` from one of the ``free`` pairings (whose kernel's
        processes are gone, so no one else maps it), zeroed: nothing of the last pairing's
        inputs or outputs is there for the next kernel to read. None if none fits."""
        for i, (pairing, arena) in enumerate(self.parked):
            if pairing in free and arena.layout == layout:
                del self.parked[i]
                arena.memory.zero_()
                self.timer.sync()  # (zeroed before the partner, which maps it next, can look)
                return arena
        return None

    def trials(self, message: Trials, fds: list[int]) -> Message:
        self.paired()
        self.spent.start()
        ran = 0
        mutates_any = False
        with self.partnered("the recheck after timing" if message.recheck
                            else "a correctness trial"):
            for trial in range(message.first, message.first + message.count):
                problem, mutates = one_trial(self, trial, message.recheck)
                mutates_any |= mutates
                if problem is not None:
                    first = self.first_trial()
                    return Incorrect(
                        trial=trial, problem=problem, recheck=message.recheck,
                        input_bytes=first.input_bytes, output_bytes=first.output_bytes,
                        kernel_resources=Resources(peak_memory_bytes=self.peak_trial_memory))
                ran += 1
        first = self.first_trial()
        return TrialsPassed(ran=ran, input_bytes=first.input_bytes,
                            output_bytes=first.output_bytes,
                            reference_resources=self.resources(), reference_mutates=mutates_any,
                            spent_ms=self.spent.taken())

    def prepare_samples(self, message: PrepareSamples, fds: list[int]) -> Message:
        """The first timed samples' inputs and their fingerprints, made now (before the GPU
        is settled for the timing, which then only copies them into the arena): each a copy
        of its own, kept by the judge alone until the pairing ends (the audit checks kept
        samples on them). Those this job's last pairing kept (the reference's timing: its
        process gone) serve as they are."""
        self.paired()
        assert self.secret is not None
        with self.partnered("preparing the timing inputs"):
            count = prepared_count(message.num_trials, self.first_trial().input_bytes)
            carried, self.carried = self.carried, None
            if carried is not None and len(carried[1].values) == count:
                self.prepared = carried[1]
                return Done()
            fresh = SampleInputs(self.kernel(), self.secret, self.scope, self.device,
                                 two_sets=self.device == "cuda")
            made = [copied_values(self.sample_values(fresh, i)) for i in range(count)]
            prints = self.resolved(*[stage_fingerprints(tensors_of(v)) for v in made])
            self.prepared = Prepared(fresh, made, prints)
        return Done()

    def time_kernel(self, message: TimeKernel, fds: list[int]) -> Message:
        self.paired()
        clock = self.clock
        assert clock is not None and self.secret is not None, "calibrate first"
        with self.partnered("timing"):
            # a reading taken again draws new inputs: the prepared ones serve the first only
            reading, self.readings = self.readings, self.readings + 1
            if reading > 0:
                self.prepared = None
            ahead = self.prepared
            fresh = ahead.fresh if ahead is not None else \
                SampleInputs(self.kernel(), self.secret, self.scope, self.device, reading,
                             two_sets=self.device == "cuda")
            self.run_inputs = fresh
            values_for, input_prints = _sample_sources(ahead, fresh, self.sample_values)
            cores = self.comparison.timing_cores if self.comparison is not None else None
            beside = self.paired_beside().run() if message.beside else None
            try:
                with _clear_of(cores):
                    self.run = time_run(clock, values_for, input_prints, message.num_trials,
                                        self.calibration, message.reference_ms, cores=cores,
                                        beside=beside, values_apart=fresh.apart)
            except CallOverran as exc:
                return PartnerFailed(during="timing", failure=Failure(
                    outcome=Outcome.RUNTIME_ERROR, message=(
                        f"a timed call of the kernel did not end within the timing's budget "
                        f"({exc}): it hangs, or each call runs far longer than the one "
                        "before")))
            for timing in (self.run.timing, self.run.beside):
                if timing is not None:
                    timing.inputs_note = fresh.note
            resources = self.resources()
            resources.peak_memory_bytes = self.peak_trial_memory
            first = self.first_trial()
            return KernelTimed(timing=self.run.timing, resources=resources,
                               input_bytes=first.input_bytes, output_bytes=first.output_bytes,
                               work=first.work, beside=self.run.beside)

    def robustness(self, message: Robustness, fds: list[int]) -> Message:
        self.paired()
        return robustness.check(self, message)

    def audit(self, message: Audit, fds: list[int]) -> Message:
        return audits.audit_kept(self)

    def paired(self) -> Partner:
        if self.partner is None:
            raise ValueError("no kernel process is paired with this judge")
        return self.partner

    def paired_beside(self) -> PairedBeside:
        if self.beside is None:
            raise ValueError("no reference's process is paired beside")
        return self.beside

    HANDLERS: ClassVar[dict[type, Callable[..., Message]]] = {
        Load: load, Pair: pair, Unpair: unpair, Calibrate: calibrate, Trials: trials,
        TimeKernel: time_kernel,
        PrepareSamples: prepare_samples, Robustness: robustness, Audit: audit,
    }


def calibrated(arena: Arena, calls: list[float], kept: bool = False,
               reused: bool = False) -> Calibrated:
    return Calibrated(arena_bytes=arena.layout.size, where=arena.layout.where,
                      null_call_ms=calls, kept=kept, arena_reused=reused)


# Trial 0's inputs are kept for the pairings to come up to this size, else made again.
KEEP_TRIAL0_BYTES = 1 << 30
# A judge keeps the arenas of its last PARKED_MAX pairings up to PARK_BYTES each, for the next
# pairings of the same layout (a batch's candidates alternate between two: the last
# candidate's process is still being torn down when the next one pairs, the one before it is
# gone): no memory made, mapped, unmapped and freed per candidate, driver calls that wait
# beside the last candidate's teardown.
PARK_BYTES = 256 * 2**20
PARKED_MAX = 2
# The timed samples' inputs made ahead (PrepareSamples) take at most this much memory
# together; samples beyond are made during the timing run, as all are for larger inputs.
PREPARED_BYTES = 64 * 2**20


def prepared_count(num_trials: int | None, input_bytes: int) -> int:
    """How many timed samples' inputs are made ahead: the samples the request fixes, or the
    adaptive rule's least, as far as PREPARED_BYTES holds them."""
    wanted = num_trials if num_trials is not None else MIN_SAMPLES
    return max(0, min(wanted, PREPARED_BYTES // max(input_bytes, 1)))


class _Answer(Exception):
    def __init__(self, reply: Message) -> None:
        super().__init__(type(reply).__name__)
        self.reply = reply


def _read_values(args: Arguments) -> list[Any]:
    return list(args.values)


def _sample_sources(ahead: Prepared | None, fresh: SampleInputs,
                   made: Callable[[SampleInputs, int], list[Any]]) -> tuple[
        Callable[[int], list[Any]], Callable[[int, list[Any]], list[list[int]]]]:
    """Each timed sample's inputs and their fingerprints: those prepared ahead first, then
    made from ``fresh``."""

    def values_for(i: int) -> list[Any]:
        if ahead is not None and i < len(ahead.values):
            return ahead.values[i]
        return made(fresh, i)

    def input_prints(i: int, values: list[Any]) -> list[list[int]]:
        if ahead is not None and i < len(ahead.prints):
            return ahead.prints[i]
        return fingerprints(tensors_of(values))

    return values_for, input_prints


@contextlib.contextmanager
def _clear_of(cores: list[int] | None) -> Iterator[None]:
    """The judge's threads kept off the core its partner is held to while it is timed."""
    from worker_host.cpu_cores import hold_threads, release_threads

    rest = set(os.sched_getaffinity(0)) - set(cores or ())
    if not cores or not rest:
        yield
        return
    before = hold_threads(rest)
    try:
        yield
    finally:
        release_threads(before)
