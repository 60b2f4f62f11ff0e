"""The kernel's process: load the kernel, run it, and serve the judge's calls.

For /evaluate and /validate the process is on its own: it makes the kernel's inputs
(:class:`RunOnce`) and times it in-process (:class:`TimeSelf`; there is no reference, so no
verdict on its outputs either). In a comparison it is paired with a judge and does what the
judge asks over the pair channel: it maps the arena, calls the kernel on the arena's input
slots (its own IOContract's other arguments beside them), and copies what the kernel returned
into the arena's output slots before it answers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch

from compilation.base import Arguments, CompileContext, ExecutableKernel, share_inputs
from harness import device_memory
from harness.arena import Arena, ArenaError
from harness.failures import classify, out_of_memory
from harness.handover import HandOverSide
from harness.inputs import SampleInputs
from harness.jit_cache import JitCaches
from harness.process import work_root
from harness.tensors import check_plain, meta, tensor_bytes, tensors_of
from harness.timer import Timer
from io_contract.tensor_utils import poison_value
from shared.models import WorkerJob
from shared.observations import TRACE_DTYPES
from shared.protocol import (
    ArenaMapped,
    Call,
    CallDone,
    CallPurpose,
    CallTrace,
    ExportJit,
    ExtraFigures,
    Extras,
    Load,
    Loaded,
    MapArena,
    Message,
    RanOnce,
    Resources,
    RunOnce,
    SelfTimed,
    TimeSelf,
    TimingReport,
    WarmedUp,
    WarmUp,
)


class KernelSession:
    def __init__(self, device: str, timer: Timer) -> None:
        self.device = device
        self.timer = timer
        self.jit = JitCaches()  # the source's JIT caches: restored before it loads
        self.job: WorkerJob | None = None
        self.exe: ExecutableKernel | None = None
        self.arena: Arena | None = None
        self.dummy: list[torch.Tensor] = []
        self.bound: tuple[Arguments, Callable[[], Any], list[torch.Tensor]] | None = None
        self.before_timing: dict[str, torch.Tensor] = {}
        self.held: dict[int, set[int]] | None = None  # threads' affinities before a timing run
        # whether this process polls its pair channel between the judge's calls (not while
        # another timed process shares its cores: WarmUp.shares_cores)
        self.polls = True
        self.sync = timer.sync
        # the hand-over of timed calls (harness.handover), bound before any user code
        self.handover = HandOverSide(device)

    # ---- helpers

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        return torch.device(self.device) if self.device == "cuda" else contextlib.nullcontext()

    def kernel(self) -> ExecutableKernel:
        assert self.exe is not None, "no kernel is loaded"
        return self.exe

    def resources(self) -> Resources:
        return device_memory.resources(self.device)

    def handle(self, message: Message, fds: list[int]) -> Message:
        handler = self.HANDLERS.get(type(message))
        if handler is None:
            raise TypeError(f"a kernel's process does not do {type(message).__name__}")
        return handler(self, message, fds)

    # ---- from the server

    def load(self, message: Load, fds: list[int]) -> Message:
        from compilation.registry import get_backend

        self.jit.seed(message, fds)
        self.job = message.job
        kernel = self.job.kernel
        fallback = self.reference_init_inputs()
        ctx = CompileContext(device=self.device, work_dir=work_root() / "kernel",
                             cache_dir=Path(self.job.cache_dir), role="custom",
                             fallback_init_inputs=fallback)
        try:
            with self.scope():
                self.exe = get_backend(kernel.kernel_type).compile(kernel, ctx)
        except Exception as exc:  # noqa: BLE001 - compile errors and user code alike
            return classify(exc, self.device)
        return Loaded(artifacts=dict(self.kernel().artifacts or {}))

    def reference_init_inputs(self) -> Callable[[], Any] | None:
        """A KernelBench ``ModelNew`` without ``get_init_inputs`` is built with the reference's
        (the reference's module is imported here for that, never run)."""
        from compilation.base import CompileError, load_module
        from compilation.torch_backend import python_preset

        job = self.job
        assert job is not None
        ref = job.ref_kernel
        if ref is None or job.kernel.io is not None \
                or ref.kernel_type.value not in ("torch", "torch_cuda"):
            return None
        try:
            with self.scope():
                module = load_module(ref.source_code, CompileContext(
                    device=self.device, work_dir=work_root() / "refinputs",
                    cache_dir=Path(job.cache_dir), role="refinputs"), python_preset())
        except CompileError:
            return None
        found = getattr(module, "get_init_inputs", None)
        return found if callable(found) else None

    def run_once(self, message: Message, fds: list[int]) -> Message:
        try:
            with self.scope():
                args = self.kernel().make_inputs(0, 0)
            outputs = self.kernel().run(args.clone())
            self.sync()
            check_plain(outputs)
        except Exception as exc:  # noqa: BLE001
            return classify(exc, self.device)
        return RanOnce(outputs=[meta(t) for t in outputs], input_bytes=tensor_bytes(args.values),
                       output_bytes=tensor_bytes(outputs), resources=self.resources())

    def time_self(self, message: TimeSelf, fds: list[int]) -> Message:
        exe = self.kernel()
        try:
            with self.scope():
                args = exe.make_inputs(0, 0)
            call = exe.prepare(args)
            fresh = SampleInputs(exe, int.from_bytes(_urandom(8), "little") >> 1, self.scope,
                                 self.device)
            targets = tensors_of([v for v, s in _with_specs(args) if _reads(s)])
            copy = torch.Tensor.copy_

            def refill(i: int) -> None:
                values = fresh.values(i)
                sources = tensors_of([v for v, s in zip(values, _specs_of(args, values))
                                      if _reads(s)])
                for dst, src in zip(targets, sources):
                    if dst.shape == src.shape and dst.dtype == src.dtype:
                        copy(dst, src)

            report = self.timer.run(call, message.num_trials, refill if targets else None)
            report.inputs_note = fresh.note
            trace = self.timer.observe(call, input_dtypes(args))
        except Exception as exc:  # noqa: BLE001
            return classify(exc, self.device, "failed while timing: ")
        return SelfTimed(timing=report, resources=self.resources(), trace=trace)

    # ---- from the judge (pair channel)

    def map_arena(self, message: MapArena, fds: list[int]) -> Message:
        if len(fds) != 1:
            raise ValueError("an arena comes with its descriptor")
        self.unpair()
        try:
            self.arena = Arena.attach(message.layout, fds.pop(), self.device)
            # (the kernel's own output buffers, as large as the problem's outputs)
            self.dummy = [torch.zeros_like(slot) for slot in self.arena.outputs]
            self.handover.attach(self.arena, self.dummy)
        except ArenaError as exc:
            return classify(exc, self.device)
        except Exception as exc:
            # a problem too large to map beside the other jobs' memory: the memory retry's
            # case (before, an internal error here read as the kernel breaking the protocol)
            if not out_of_memory(exc):
                raise
            return classify(exc, self.device, "mapping the problem's inputs and outputs: ")
        return ArenaMapped()

    def bind(self) -> tuple[Arguments, Callable[[], Any], list[torch.Tensor]]:
        """The call on the arena's inputs, bound once: (arguments, bare call, own outputs)."""
        if self.bound is None:
            exe, arena, job = self.kernel(), self.arena, self.job
            assert arena is not None and job is not None
            ref_io = job.ref_kernel.io if job.ref_kernel is not None else None
            received = Arguments(arena.values(), list(ref_io.args) if ref_io else None)
            if exe.io is None:
                args = received
            else:
                with self.scope():
                    args = share_inputs(exe.make_inputs(0, 0), received, copy=False)
            arena_ptrs = {t.data_ptr() for t in arena.inputs}
            own = [t for t in args.output_tensors() if t.data_ptr() not in arena_ptrs]
            self.bound = (args, exe.prepare(args), own)
        return self.bound

    def call(self, message: Call, fds: list[int]) -> Message:
        arena = self.arena
        if arena is None:
            raise ValueError("no arena is mapped")
        if message.purpose == CallPurpose.TRIAL:
            return self.trial(message)
        if message.seq <= 0:
            raise ValueError("a timed call needs its hand-over number")
        return self.handed_over(message, arena)

    def trial(self, message: Call) -> Message:
        """A correctness trial: the kernel's own output buffers poisoned, the call, a device
        synchronise, the outputs copied into the arena."""
        try:
            args, _, own = self.bind()
            for t in own:  # an output the kernel does not write shows
                t.fill_(poison_value(t.dtype))
            outputs = self.kernel().run(args)
            self.sync()
            check_plain(outputs)
        except Exception as exc:  # noqa: BLE001
            return classify(exc, self.device)
        done = self.copied_out(message.index, outputs)
        self.sync()
        done.peak_memory_bytes = int(torch.cuda.max_memory_allocated()) \
            if self.device == "cuda" else 0
        return done

    def handed_over(self, message: Call, arena: Arena) -> Message:
        """A timed sample or null call, handed over on the judge's clock: on a GPU the call
        and the copy of its outputs are enqueued after a wait for the judge's signal and
        before this process's own (answered at once: the device runs them in order); on the
        CPU the judge's message comes after the inputs, and the answer says the call ran."""
        side = self.handover
        failure: Message | None = None
        done: CallDone | None = None
        side.wait_for_inputs(message.seq)
        try:
            if message.purpose == CallPurpose.CALIBRATE:
                outputs = self.dummy
            else:
                args, call, _ = self.bind()
                outputs = self.kernel().prepared_outputs(call(), args)
                check_plain(outputs)
            done = self.copied_out(message.index, outputs)
        except Exception as exc:  # noqa: BLE001
            failure = classify(exc, self.device, "failed while timing: ")
        finally:
            side.signal_done(message.seq)
        return failure if failure is not None else done  # type: ignore[return-value]

    def copied_out(self, index: int, outputs: list[torch.Tensor]) -> CallDone:
        """Copy ``outputs`` into the arena's output slots when they fit them (enqueued, on a
        GPU), and say what they were."""
        arena = self.arena
        assert arena is not None
        fits = len(outputs) == len(arena.outputs) and all(
            o.shape == s.shape and o.dtype == s.dtype for o, s in zip(outputs, arena.outputs))
        if fits:
            for slot, out in zip(arena.outputs, outputs):
                slot.copy_(out)
        return CallDone(index=index, outputs=[meta(t) for t in outputs], copied=fits,
                        output_bytes=tensor_bytes(outputs))

    def buffers(self) -> dict[str, torch.Tensor]:
        fn = getattr(self.kernel(), "fn", None)
        return dict(fn.named_buffers()) if isinstance(fn, torch.nn.Module) else {}

    def warm_up(self, message: WarmUp, fds: list[int]) -> Message:
        # Timing calls the kernel many more times than the reference: a module whose buffers
        # change with each call (training-mode BatchNorm) is put back as the trials left it
        # once timing is over, for the recheck (see extras).
        self.before_timing = {k: v.detach().clone() for k, v in self.buffers().items()}
        self.hold(message.cores)
        self.polls = not message.shares_cores
        try:
            _, call, _ = self.bind()
            calls, ms = self.timer.warm_up(call, message.quick)
        except Exception as exc:  # noqa: BLE001
            return classify(exc, self.device, "failed while timing: ")
        return WarmedUp(calls=calls, ms=ms)

    def extras(self, message: Extras, fds: list[int]) -> Message:
        trace: CallTrace | None = None
        try:
            args, call, _ = self.bind()
            if message.trace:  # (first: the call closest to the timed ones)
                trace = self.timer.observe(call, input_dtypes(args))
            report = self.timer.extras(call, message.median_ms, message.samples,
                                       message.num_trials, cross_checks=False) \
                if message.figures else TimingReport(method=self.timer.method, event_ms=[])
        except Exception as exc:  # noqa: BLE001
            return classify(exc, self.device, "failed while timing: ")
        finally:
            buffers = self.buffers()
            for name, value in self.before_timing.items():
                if name in buffers and buffers[name].shape == value.shape:
                    buffers[name].copy_(value)
            self.before_timing = {}
            self.hold(None)
        return ExtraFigures(report=report, trace=trace)

    def hold(self, cores: list[int] | None) -> None:
        """Hold this process's threads to ``cores`` for a timing run (the same core for the
        reference's process and the candidate's: a call that waits for the device from
        inside is as fast as the host thread that launches the rest), or let them go."""
        from worker_host.cpu_cores import hold_threads, release_threads

        self.polls = True
        if self.held is not None:
            release_threads(self.held)
            self.held = None
        if cores:
            self.held = hold_threads(set(cores))

    def unpair(self) -> None:
        self.hold(None)
        self.handover.detach()
        if self.arena is not None:
            self.arena.close()
        self.arena, self.bound, self.dummy = None, None, []

    def export_jit(self, message: ExportJit, fds: list[int]) -> Message:
        return self.jit.export(message, fds)

    HANDLERS: ClassVar[dict[type, Callable[..., Message]]] = {
        Load: load, ExportJit: export_jit, RunOnce: run_once, TimeSelf: time_self, MapArena: map_arena, Call: call, WarmUp: warm_up,
        Extras: extras,
    }


def _urandom(n: int) -> bytes:
    import os

    return os.urandom(n)


def input_dtypes(args: Arguments) -> list[str]:
    """The distinct dtypes of the tensors a call reads, in order ("float32")."""
    found: list[str] = []
    for t in args.input_tensors():
        name = str(t.dtype).removeprefix("torch.")
        if name not in found:
            found.append(name)
    return found[:TRACE_DTYPES]


def _with_specs(args: Arguments) -> list[tuple[Any, Any]]:
    specs = args.specs if args.specs is not None else [None] * len(args.values)
    return list(zip(args.values, specs))


def _specs_of(args: Arguments, values: list[Any]) -> list[Any]:
    return list(args.specs) if args.specs is not None else [None] * len(values)


def _reads(spec: Any) -> bool:
    """Whether an argument is one the kernel reads (an input or inout; any without specs)."""
    return spec is None or spec.role in ("input", "inout")
