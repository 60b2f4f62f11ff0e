"""The job process: one side of one job, in a sandbox, driven by the server over a channel.

    python subprocess_worker.py --probe <file>    write what this host's worker stack can do

Job processes are not started from the command line: the zygote (:mod:`orchestration.zygote`)
forks them and calls :func:`serve`. A job process first gets ready with no user code in it
(CUDA context, timer primitives bound: :func:`profiling.timer.bind`), says so, then obeys the
server's operations (:class:`Session`), one at a time, and exits when told or when the
channel closes.

Roles (what the server loads into a process):

- ``kernel``: /evaluate and /validate: compile, run once, time.
- ``ref``: the reference of a /compare, and its **checker**: it makes each trial's inputs,
  runs the reference, and compares the custom kernel's outputs (which arrive as sealed
  memory files) with its own. Custom code is never imported here.
- ``custom``: the kernel under test: it runs on the reference's inputs and hands back its
  outputs; its own verdict on them is never asked for.
- ``build``: the CPU build stage: import the source with ``load_inline`` going through the
  build cache, nothing else.

Every reply is data the server checks; nothing a ``custom`` process says about its own
correctness is believed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shared.channel import Channel, ChannelClosed
from shared.job_files import write_atomic
from shared.models import KernelExecResult, Outcome, WorkerJob

DEVICE_ENV = "KES_DEVICE"
TIMING_SEED_BASE = 7_000_000  # fresh inputs for timing samples: never a correctness trial's
SLOW_REFILL_S = 0.02  # slower than this per sample: rotate two input sets instead
# Cached, unused GPU memory a process returns to the driver after a phase (see
# Session.release_cached_memory); below this, keeping it costs the other process nothing.
RELEASE_CACHED_BYTES = 64 * 2**20


def failed(outcome: Outcome, compiled: bool = False, **fields: Any) -> KernelExecResult:
    return KernelExecResult(outcome=outcome, compiled=compiled, **fields)


# ATen's float functions that oneMKL's vector math (VML) computes (ATen/cpu/vml.h). The oneMKL
# in torch's wheels picks each function's code path on its first call; first calls made at
# once by several intra-op threads can leave one thread's chunk on the low-accuracy path
# (pytorch/pytorch#188792). In a fresh worker the first such call is a kernel's, on its first
# correctness trial: a rare false "incorrect" (a tanh-GELU off by 1.7e-4 where it is ~1e-4).
VML_FUNCTIONS = ("acos", "asin", "atan", "cos", "erf", "erfc", "erfinv", "exp", "log", "log10",
                 "log2", "sin", "sqrt", "tan", "tanh", "trunc")


def warm_cpu_math() -> None:
    """Call each VML function once, on one thread (a tensor under the parallel grain), so that
    every worker forked afterwards inherits oneMKL's choice made without a race."""
    import torch

    for dtype in (torch.float32, torch.float64):
        t = torch.full((16,), 0.5, dtype=dtype)
        for name in VML_FUNCTIONS:
            getattr(torch, name)(t)


def prepare_process(device: str) -> None:
    """Create the CUDA context (or set up CPU mode) before any job arrives."""
    import torch

    if device == "cuda":
        torch.cuda.init()
        # What a first kernel would otherwise pay inside its job: the allocator, the RNG,
        # the cuBLAS handle.
        torch.manual_seed(0)
        warm = torch.randn(64, 64, device="cuda")
        (warm @ warm).sum().item()
    else:
        # KernelBench sources call .cuda() on inputs and models; on a CPU host that is a no-op.
        torch.Tensor.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]
        torch.nn.Module.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]


class Session:
    """The state of one job process: its role, its compiled kernel, its trial data."""

    def __init__(self, device: str) -> None:
        from profiling import timer

        self.device = device
        self.timer = timer.bind(device)  # before any user code: see profiling.timer
        import torch

        self._copy = torch.Tensor.copy_
        self._sync = torch._C._cuda_synchronize if device == "cuda" else (lambda: None)
        if device == "cuda":
            reserved, allocated = torch.cuda.memory_reserved, torch.cuda.memory_allocated
            self._idle_cached = lambda: reserved() - allocated()
            self._empty_cache = torch.cuda.empty_cache
        else:
            self._idle_cached, self._empty_cache = (lambda: 0), (lambda: None)
        self.job: WorkerJob | None = None
        self.role = ""
        self.exe: Any = None
        self.ref_outputs: dict[int, list[Any]] = {}
        self.input_prints: dict[int, list[list[int]]] = {}
        self.ref_module: Any = None
        self.timing_args: Any = None
        self.timing_sets: list[list[Any]] | None = None
        self.ref_mutates = False
        # the audit of the timed samples (see profiling.timer.SampleAudit): what the custom
        # kept, and what the checker needs to rerun the reference on the same inputs
        self.audit: Any = None
        self.made_sets: list[list[Any]] = []
        self.trial0_prints: list[list[int]] | None = None
        self.deferred_load: dict[str, Any] | None = None
        # set by a phase that needed more GPU memory than the next ones (timing, the audit):
        # the serving loop releases torch's cached memory once the reply is sent, outside the
        # server's clock on the call (see release_cached_memory)
        self.release_after_reply = False

    # ---- helpers

    def context(self, role: str, fallback_init: Callable[[], Any] | None = None) -> Any:
        from compilation.base import CompileContext

        assert self.job is not None
        return CompileContext(
            device=self.device, work_dir=Path.cwd() / role, cache_dir=Path(self.job.cache_dir),
            role=role, fallback_init_inputs=fallback_init,
        )

    def device_scope(self) -> Any:
        import contextlib

        import torch

        return torch.device(self.device) if self.device == "cuda" else contextlib.nullcontext()

    def release_cached_memory(self) -> None:
        """Give the GPU memory torch's allocator keeps cached (freed, not returned) back to
        the driver, after a phase that needed more than the next ones: the job's other process
        allocates outside this allocator, and a multi-GB problem fits only if this one's
        timing does not keep its samples' outputs and refills reserved."""
        if self._idle_cached() > RELEASE_CACHED_BYTES:
            self._sync()
            self._empty_cache()

    def resources(self) -> dict[str, Any]:
        if self.device != "cuda":
            return {}
        import torch

        from validation import transfer

        free, total = torch.cuda.mem_get_info()
        # Memory exported to another process lies outside torch's allocator: counted beside it.
        return {"peak_memory_bytes": int(torch.cuda.max_memory_allocated()),
                "peak_shared_bytes": int(transfer.peak_device_export_bytes),
                "device_free_bytes": int(free), "device_total_bytes": int(total)}

    def make_inputs(self, trial: int) -> Any:
        with self.device_scope():
            return self.exe.make_inputs(trial)

    # ---- operations

    def op_load(self, msg: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        self.job = WorkerJob.model_validate(msg["job"])
        self.role = msg["role"]
        kernel = self.job.ref_kernel if self.role == "ref" else self.job.kernel
        assert kernel is not None
        if self.role == "build":
            return self.prebuild(kernel)
        if self.role == "ref" and msg.get("compile") is False:
            # a checker for a reused reference: nothing of it runs here unless the audit
            # of the timed samples needs the reference once (see op_audit)
            self.deferred_load = msg
            return {"ok": True}
        return self.compile_kernel(kernel)

    def compile_kernel(self, kernel: Any) -> dict[str, Any]:
        from compilation.base import CompileError, KernelError, load_module, user_traceback
        from compilation.registry import get_backend

        assert self.job is not None
        fallback = None
        if self.role == "custom" and self.job.ref_kernel is not None and kernel.io is None \
                and self.job.ref_kernel.kernel_type.value in ("torch", "torch_cuda"):
            # The reference's get_inputs / get_init_inputs (KernelBench): fresh timing inputs
            # and ModelNew's constructor arguments. Its Model is never run here.
            from compilation.torch_backend import python_preset

            try:
                with self.device_scope():
                    self.ref_module = load_module(
                        self.job.ref_kernel.source_code, self.context("refinputs"), python_preset()
                    )
                fallback = getattr(self.ref_module, "get_init_inputs", None)
            except CompileError:
                self.ref_module = None
        try:
            with self.device_scope():
                self.exe = get_backend(kernel.kernel_type).compile(kernel, self.context(self.role, fallback))
        except KernelError as exc:
            return {"result": failed(Outcome.COMPILE_ERROR, compilation_error=str(exc)).model_dump()}
        except Exception as exc:  # noqa: BLE001 - a user-code error a backend let through
            return {"result": failed(Outcome.COMPILE_ERROR,
                                     compilation_error=user_traceback(exc)).model_dump()}
        return {"ok": True, "artifacts": dict(getattr(self.exe, "artifacts", {}) or {})}

    def prebuild(self, kernel: Any) -> dict[str, Any]:
        from compilation.base import load_module
        from compilation.torch_backend import python_preset
        from compilation.torch_cuda_backend import CachedLoadInline, ExtensionBuildError

        assert self.job is not None
        loader = CachedLoadInline(Path(self.job.cache_dir) / "torch_ext")
        try:
            with loader.installed():
                load_module(kernel.source_code, self.context("build"), python_preset())
        except Exception as exc:  # noqa: BLE001
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            if isinstance(cause, ExtensionBuildError):
                return {"result": failed(Outcome.COMPILE_ERROR, compilation_error=str(cause)).model_dump()}
            # Anything else (e.g. module code that needs a GPU) is left to the GPU stage.
            return {"ok": True, "deferred": f"{type(exc).__name__}: {exc}"[:500]}
        return {"ok": True, "builds": [
            {"name": b.name, "cached": b.cached, "seconds": round(b.seconds, 3)} for b in loader.builds
        ]}

    def op_evaluate(self, msg: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        from compilation.base import InputError, KernelError

        started = time.perf_counter()
        try:
            args = self.make_inputs(0)
        except InputError as exc:
            return {"result": failed(Outcome.COMPILE_ERROR, compilation_error=str(exc)).model_dump()}
        inputs_s = time.perf_counter() - started
        try:
            outputs = self.exe.run(args.clone())
            self._sync()
            check_plain_tensors(outputs)
        except KernelError as exc:
            return {"result": failed(Outcome.COMPILE_ERROR, compilation_error=str(exc)).model_dump()}
        except Exception as exc:  # noqa: BLE001
            return {"result": self.runtime_failure(exc).model_dump()}
        reply: dict[str, Any] = {
            "outputs": [describe_tensor(t) for t in outputs],
            "input_bytes": tensor_bytes(args.values), "output_bytes": tensor_bytes(outputs),
            "inputs_s": inputs_s,
        }
        del outputs
        if msg.get("profile"):
            try:
                reply["timing"] = self.time_call(args, _num_trials(msg))
            except Exception as exc:  # noqa: BLE001
                return {"result": self.runtime_failure(exc, "failed while timing: ").model_dump()}
        reply["resources"] = self.resources()
        return reply

    def op_ref_trial(self, msg: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        from validation import transfer

        trial = int(msg["trial"])
        # Through host memory only what the server will store for reuse (and fits there).
        record_up_to = int(msg.get("record_up_to", 0))
        try:
            args = self.make_inputs(trial)
            in_bytes = tensor_bytes(args.values)
            description, layout, fd_in = transfer.export(args.values,
                                                         on_device=in_bytes > record_up_to)
        except Exception as exc:  # noqa: BLE001 - the reference's own failure
            return {"result": self.runtime_failure(exc).model_dump()}
        try:
            prints = [fingerprint(t) for t in _tensors(args.values)]
            outputs = self.exe.run(args)
            self._sync()
            outputs = [t.detach() for t in outputs]
            tensors = _tensors(args.values)
            mutated = any(fingerprint(tensors[i]) != prints[i]
                          for i in tensor_positions(args, ("input",)))
        except Exception as exc:  # noqa: BLE001
            os.close(fd_in)
            return {"result": self.runtime_failure(exc).model_dump()}
        self.ref_mutates |= mutated
        del args
        self.ref_outputs[trial] = outputs
        self.input_prints[trial] = prints
        if trial == 0:
            self.trial0_prints = prints
        reply: dict[str, Any] = {
            "inputs": {"description": description, "layout": layout}, "mutates": mutated,
            "input_prints": prints,
            "input_bytes": transfer.total_bytes(layout), "output_bytes": tensor_bytes(outputs),
            "resources": self.resources(),
        }
        fds_out = [fd_in]
        if record_up_to and in_bytes + tensor_bytes(outputs) <= record_up_to:
            out_desc, out_layout, fd_out = transfer.export(outputs)
            reply["outputs"] = {"description": out_desc, "layout": out_layout}
            fds_out.append(fd_out)
        reply["_fds"] = fds_out
        return reply

    def op_cached_trial(self, msg: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        """A reused reference trial: its outputs come from the server's cache, not a run."""
        from validation import transfer

        out = msg["outputs"]
        self.ref_outputs[int(msg["trial"])] = transfer.load(
            out["description"], out["layout"], fds[0], self.device, expect_sealed=False)
        self.ref_mutates |= bool(msg.get("mutates"))
        self.input_prints[int(msg["trial"])] = [list(p) for p in msg.get("input_prints", [])]
        return {"ok": True}

    def receive_args(self, msg: dict[str, Any], fd: int, trial: int) -> Any:
        """The reference's inputs, arranged for this kernel (raises InputError on misfit)."""
        from compilation.base import Arguments, share_inputs
        from validation import transfer

        assert self.job is not None
        inputs = msg["inputs"]
        values = transfer.load(inputs["description"], inputs["layout"], fd, self.device)
        ref_io = self.job.ref_kernel.io if self.job.ref_kernel is not None else None
        received = Arguments(values, list(ref_io.args) if ref_io is not None else None)
        if self.exe.io is None:
            return received
        with self.device_scope():
            own = self.exe.make_inputs(trial)
        return share_inputs(own, received, copy=False)

    def op_custom_trial(self, msg: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        from compilation.base import InputError, KernelError
        from validation.transfer import TransferError

        trial = int(msg["trial"])
        try:
            args = self.receive_args(msg, fds[0], trial)
        except InputError as exc:
            return {"result": failed(Outcome.COMPILE_ERROR, compilation_error=str(exc)).model_dump()}
        except TransferError as exc:
            return {"result": self.runtime_failure(exc, "receiving the inputs: ").model_dump()}
        try:
            outputs = self.exe.run(args)
            self._sync()
            check_plain_tensors(outputs)
        except KernelError as exc:
            return {"result": failed(Outcome.COMPILE_ERROR, compilation_error=str(exc)).model_dump()}
        except Exception as exc:  # noqa: BLE001
            return {"result": self.runtime_failure(exc).model_dump()}
        return self.export_outputs(outputs, args)

    def export_outputs(self, outputs: list[Any], args: Any) -> dict[str, Any]:
        from validation import transfer

        try:
            out_desc, out_layout, fd_out = transfer.export(outputs, on_device=True)
        except transfer.TransferError as exc:
            return {"result": failed(Outcome.RUNTIME_ERROR, compiled=True,
                                     runtime_error=str(exc)).model_dump()}
        after = received_input_tensors(args)
        return {
            "outputs": {"description": out_desc, "layout": out_layout},
            "inputs_after": {"prints": [fingerprint(t) for t, _ in after],
                             "check": [i for i, (_, check) in enumerate(after) if check]},
            "output_bytes": transfer.total_bytes(out_layout),
            "resources": self.resources(),
            "_fds": [fd_out],
        }

    def op_check(self, msg: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        """The checker: the custom kernel's outputs (fds[0]) against this reference's."""
        from validation import transfer
        from validation.compare import compare_outputs

        assert self.job is not None
        trial = int(msg["trial"])
        fd_out = fds[0]
        want = self.ref_outputs.pop(trial)
        originals = self.input_prints.pop(trial, [])
        out = msg["outputs"]
        try:
            got = transfer.load(out["description"], out["layout"], fd_out, self.device,
                                expect_sealed=False)
        except transfer.TransferError as exc:
            return {"problem": f"the kernel's outputs could not be read: {exc}"}
        got_tensors = [v for v in got if _is_tensor(v)]
        if len(got_tensors) != len(got):
            return {"problem": "the kernel returned something other than tensors"}
        problem = compare_outputs(got_tensors, want, self.job.atol, self.job.rtol)
        del got, got_tensors, want
        if problem is None and not self.ref_mutates and not msg.get("ref_mutates"):
            after = msg["inputs_after"]
            in_layout = originals
            # The custom kernel's i-th input tensor is the reference's i-th input tensor
            # (of every tensor, when the reference has no IOContract).
            ref_io = self.job.ref_kernel.io if self.job.ref_kernel is not None else None
            if ref_io is None:
                positions = list(range(len(in_layout)))
            else:
                positions = [i for i, s in enumerate(a for a in ref_io.args if a.type == "tensor")
                             if s.role in ("input", "inout")]
            for i in after.get("check", []):
                if i >= len(after.get("prints", [])) or i >= len(positions) \
                        or positions[i] >= len(originals):
                    return {"problem": "the kernel's inputs after its call are missing"}
                if list(after["prints"][i]) != list(originals[positions[i]]):
                    problem = (f"the kernel modified its input {self.input_name(positions[i])}, "
                               "which the reference leaves unchanged (declare it role 'inout' "
                               "if writing it is intended)")
                    break
        return {"problem": problem}

    def input_name(self, position: int) -> str:
        """'x' for the reference's tensor argument at ``position``, '#n' if it has no name."""
        import inspect

        assert self.job is not None and self.job.ref_kernel is not None
        io = self.job.ref_kernel.io
        if io is not None:
            names = [a.name for a in io.args if a.type == "tensor"]
        else:
            fn = getattr(self.exe, "fn", None)
            target: Any = getattr(fn, "forward", fn)
            try:
                names = [p.name for p in inspect.signature(target).parameters.values()
                         if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            except (TypeError, ValueError):
                names = []
        return f"'{names[position]}'" if position < len(names) else f"#{position}"

    def op_timing_inputs(self, msg: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        """Fresh input sets for the custom kernel's timing samples, made here, not there.

        The custom kernel's process could slow down or bend input generation done inside it;
        sets made by this process arrive as data (one sealed file) it can only copy from.
        """
        from validation import transfer

        count = int(msg["count"])
        tensors: list[Any] = []
        per_set = 0
        self.made_sets = []
        try:
            for k in range(count):
                values = _tensors(received_input_values(self.make_inputs(TIMING_SEED_BASE + k)))
                per_set = len(values)
                tensors.extend(values)
                self.made_sets.append(values)  # kept for the audit of the timed samples
            _, layout, fd = transfer.export(tensors, on_device=not msg.get("host"))
        except Exception as exc:  # noqa: BLE001 - the reference's input code failed
            return {"result": self.runtime_failure(exc, "making timing inputs: ").model_dump()}
        return {"layout": layout, "per_set": per_set, "count": count, "_fds": [fd]}

    def op_prepare_timing(self, msg: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        """Load what the timing run needs, so that ``time`` itself does only the timing."""
        from compilation.base import InputError
        from validation import transfer

        sets: list[list[Any]] | None = None
        try:
            if self.role == "custom":
                args = self.receive_args(msg, fds[0], 0)
                given = msg.get("timing_sets")
                if given and len(fds) > 1 and given["per_set"] > 0:
                    loaded = transfer.load_tensors(fds[1], given["layout"], self.device)
                    n = int(given["per_set"])
                    sets = [loaded[i:i + n] for i in range(0, len(loaded), n)]
            else:
                args = self.make_inputs(0)
        except InputError as exc:
            return {"result": failed(Outcome.COMPILE_ERROR, compilation_error=str(exc)).model_dump()}
        except Exception as exc:  # noqa: BLE001
            return {"result": self.runtime_failure(exc).model_dump()}
        self.timing_args, self.timing_sets = args, sets
        return {"ok": True}

    def op_time(self, msg: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        if self.timing_args is None:
            prepared = self.op_prepare_timing(msg, fds)
            if "result" in prepared:
                return prepared
        try:
            timing = self.time_call(self.timing_args, _num_trials(msg), self.timing_sets)
        except Exception as exc:  # noqa: BLE001
            return {"result": self.runtime_failure(exc, "failed while timing: ").model_dump()}
        if self.role == "ref":
            # timed before the correctness trials: its inputs are not kept through them (a
            # second measurement makes them again)
            self.timing_args = None
        self.release_after_reply = True
        return {"timing": timing, "resources": self.resources()}

    def op_recheck(self, msg: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        """Fresh inputs copied *into* the timed call's tensors (same pointers), run, outputs."""
        try:
            fresh = self.receive_args(msg, fds[0], int(msg.get("trial", 0)))
            for dst, src in zip(_tensors(self.timing_args.values), _tensors(fresh.values)):
                if dst is not src and dst.shape == src.shape and dst.dtype == src.dtype:
                    self._copy(dst, src)
            outputs = self.exe.run(self.timing_args)
            self._sync()
            check_plain_tensors(outputs)
        except Exception as exc:  # noqa: BLE001
            return {"result": self.runtime_failure(exc, "failed on fresh inputs after timing: ").model_dump()}
        return self.export_outputs(outputs, self.timing_args)

    def op_audit_outputs(self, msg: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        """The outputs of the timed sample the audit kept, for the checker (see op_audit)."""
        from validation import transfer

        audit, self.audit = self.audit, None
        if audit is None:
            return {"audit": {"error": "this process kept no timed sample"}}
        report = audit.report()
        if audit.kept is None:
            return {"audit": report}
        kept, audit.kept = audit.kept, None
        plan = [{"shape": k.shape, "sampled": k.positions is not None} for k in kept]
        tensors: list[Any] = []
        for k in kept:
            tensors += [k.values] if k.positions is None else [k.values, k.positions]
        try:
            out_desc, out_layout, fd_out = transfer.export(tensors, on_device=True)
        except Exception as exc:  # noqa: BLE001
            report["error"] = f"the kept outputs could not be handed over: {type(exc).__name__}: {exc}"
            return {"audit": report}
        del kept, tensors
        report["outputs"] = {"description": out_desc, "layout": out_layout}
        report["plan"] = plan
        return {"audit": report, "_fds": [fd_out]}

    def op_audit(self, msg: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        """The checker: a timed sample's outputs (fds[0]) against the reference's on the
        inputs that sample had: timing set ``set`` (kept here when this process made it, else
        in the file fds[1]) or, without sets, trial 0's inputs (made again here and checked
        to be the same bytes, or read from the file fds[1]).

        ``{"problem": ...}`` when they differ; ``{"skipped": why}`` when the inputs cannot be
        had again or the reference cannot run again (the server then reports the timing as
        unaudited).
        """
        from compilation.base import Arguments
        from validation import transfer

        assert self.job is not None
        self.release_after_reply = True  # the reference's rerun, before the recheck
        try:
            if self.exe is None and self.deferred_load is not None:
                loaded = self.compile_kernel(self.job.ref_kernel)
                if "result" in loaded:
                    return {"skipped": "the reference did not compile again"}
            set_index = msg.get("set")
            given = msg.get("inputs")
            if set_index is not None:
                if given is not None:
                    per_set = int(given["per_set"])
                    loaded_sets = transfer.load_tensors(fds[1], given["layout"], self.device)
                    values = loaded_sets[int(set_index) * per_set:(int(set_index) + 1) * per_set]
                elif int(set_index) < len(self.made_sets):
                    values = self.made_sets[int(set_index)]
                else:
                    return {"skipped": f"timing input set {set_index} is not here"}
                args = self.make_inputs(0)
                targets = _tensors(received_input_values(args))
                for dst, src in zip(targets, values):
                    if dst.shape == src.shape and dst.dtype == src.dtype:
                        self._copy(dst, src)
            elif given is not None:
                ref_io = self.job.ref_kernel.io if self.job.ref_kernel is not None else None
                args = Arguments(transfer.load(given["description"], given["layout"], fds[1],
                                               self.device),
                                 list(ref_io.args) if ref_io is not None else None)
            else:
                args = self.make_inputs(0)
                prints = [fingerprint(t) for t in _tensors(args.values)]
                if self.trial0_prints is None or prints != self.trial0_prints:
                    return {"skipped": "the reference's inputs come out different when made "
                                       "again (get_inputs is not reproducible)", "expected": True}
            saved = self.module_state()
            want = self.exe.run(args)
            self._sync()
            want = [t.detach() for t in want]
            if self.state_moved(saved):
                # its outputs depend on the calls before (training-mode BatchNorm returning its
                # running statistics): no rerun here matches the timed sample's history
                self.restore_module_state(saved)  # as the recheck after timing expects it
                return {"skipped": "the reference's module state changes with every call, so "
                                   "its outputs depend on the calls before", "expected": True}
        except Exception as exc:  # noqa: BLE001 - the reference's own trouble, not the kernel's
            return {"skipped": f"the reference could not run again: {type(exc).__name__}: "
                               f"{str(exc)[:300]}"}
        out = msg["outputs"]
        try:
            got = transfer.load(out["description"], out["layout"], fds[0], self.device,
                                expect_sealed=False)
        except transfer.TransferError as exc:
            return {"problem": f"the timed sample's outputs could not be read: {exc}"}
        except Exception as exc:  # noqa: BLE001 - e.g. no memory left for them here
            return {"skipped": f"the timed sample's outputs could not be loaded: "
                               f"{type(exc).__name__}: {str(exc)[:300]}"}
        got_tensors = [v for v in got if _is_tensor(v)]
        if len(got_tensors) != len(got):
            return {"problem": "the timed call returned something other than tensors"}
        try:
            return {"problem": audited_difference(msg.get("plan"), got_tensors, want,
                                                  self.job.atol, self.job.rtol)}
        except Exception as exc:  # noqa: BLE001 - e.g. no memory for the comparison here
            return {"skipped": f"the comparison could not run: {type(exc).__name__}: "
                               f"{str(exc)[:300]}"}

    # ---- timing

    def time_call(self, args: Any, num_trials: int | None,
                  sets: list[list[Any]] | None = None) -> dict[str, Any]:
        """Raw timing samples of the call on ``args``; ``num_trials`` None: adaptive count."""
        prepare = getattr(self.exe, "prepare", None)
        call = prepare(args) if prepare is not None else (lambda: self.exe.run(args))
        refill = self.refiller(args, sets)
        saved = self.module_state()
        # a comparison's kernel: one timed sample is checked (see op_audit)
        audit = (self.timer.audit(self.outputs_rule(args, prepare is not None))
                 if self.role == "custom" else None)
        self.audit = None
        try:
            raw = self.timer.run(call, num_trials, refill, audit)
        finally:
            self.restore_module_state(saved)
        samples = len(raw["event_ms"])
        raw["input_sets"] = len(sets) if sets is not None else (0 if refill is None else samples)
        self.audit = audit
        return raw

    def outputs_rule(self, args: Any, prepared: bool) -> Callable[[Any], list[Any]]:
        """What to compare of what a timed call on ``args`` returned (the backend's rule)."""
        from compilation.base import returned_outputs

        if not prepared:
            return list  # ``run`` itself was timed: it returns the outputs
        rule = getattr(self.exe, "prepared_outputs", None) or returned_outputs
        return lambda result: list(rule(result, args))

    def module_state(self) -> dict[str, Any] | None:
        """The model's buffers (e.g. BatchNorm running stats) before timing.

        Timing calls the model a different number of times in the reference's and the
        kernel's process; a model whose buffers change with each call (training-mode
        BatchNorm) must be rechecked in the state the correctness trials left it in.
        """
        import torch

        fn = getattr(self.exe, "fn", None)
        if not isinstance(fn, torch.nn.Module):
            return None
        return {name: b.detach().clone() for name, b in fn.named_buffers()}

    def state_moved(self, saved: dict[str, Any] | None) -> bool:
        """Whether the model's buffers differ from ``saved`` (see :meth:`module_state`)."""
        import torch

        if not saved:
            return False
        buffers = dict(self.exe.fn.named_buffers())
        return any(name not in buffers or buffers[name].shape != value.shape
                   or not torch.equal(buffers[name], value) for name, value in saved.items())

    def restore_module_state(self, saved: dict[str, Any] | None) -> None:
        if not saved:
            return
        buffers = dict(self.exe.fn.named_buffers())
        for name, value in saved.items():
            if name in buffers and buffers[name].shape == value.shape:
                self._copy(buffers[name], value)

    def refiller(self, args: Any, sets: list[list[Any]] | None = None
                 ) -> Callable[[int], None] | None:
        """Copy fresh input values into ``args``'s input tensors before each sample.

        From ``sets`` (made by the checker) in turn when given; else, in a process that runs
        no custom code, freshly generated for every sample.
        """
        targets = _tensors(received_input_values(args))
        if not targets:
            return None
        copy = self._copy
        if self.role == "custom":
            if not sets:
                return None
            given = sets

            def rotate(i: int) -> None:
                for dst, src in zip(targets, given[i % len(given)]):
                    if dst.shape == src.shape and dst.dtype == src.dtype:
                        copy(dst, src)
            return rotate
        generate = self.input_generator()
        if generate is None:
            return None
        made: list[list[Any]] = []

        def fresh(i: int) -> list[Any]:
            return _tensors(generate(TIMING_SEED_BASE + i))

        def refill(i: int) -> None:
            if len(made) == 2:  # slow generator: alternate two sets made earlier
                values = made[i % 2]
            else:
                started = time.perf_counter()
                values = fresh(i)
                if time.perf_counter() - started > SLOW_REFILL_S:
                    made.append(values)
                    if len(made) == 1:
                        made.append(fresh(i + 1))
            for dst, src in zip(targets, values):
                if dst.shape == src.shape and dst.dtype == src.dtype:
                    copy(dst, src)

        return refill

    def input_generator(self) -> Callable[[int], list[Any]] | None:
        from compilation.torch_backend import INPUT_SEED, seed_everything
        from io_contract.tensor_utils import trial_seed

        own_io = getattr(self.exe, "io", None)
        get_inputs = getattr(getattr(self.exe, "module", None), "get_inputs", None)
        if own_io is None and callable(get_inputs):
            def generate(trial: int) -> list[Any]:
                seed_everything(trial_seed(INPUT_SEED, trial))
                with self.device_scope():
                    return list(get_inputs())
            return generate
        if own_io is not None:
            def generate_io(trial: int) -> list[Any]:
                with self.device_scope():
                    return self.exe.make_inputs(trial).input_tensors()
            return generate_io
        return None

    def runtime_failure(self, exc: BaseException, prefix: str = "") -> KernelExecResult:
        return failed(Outcome.RUNTIME_ERROR, compiled=True,
                      runtime_error=prefix + runtime_message(exc, self.device))


OPS = {
    "load": Session.op_load,
    "evaluate": Session.op_evaluate,
    "ref_trial": Session.op_ref_trial,
    "cached_trial": Session.op_cached_trial,
    "custom_trial": Session.op_custom_trial,
    "check": Session.op_check,
    "prepare_timing": Session.op_prepare_timing,
    "time": Session.op_time,
    "timing_inputs": Session.op_timing_inputs,
    "recheck": Session.op_recheck,
    "audit_outputs": Session.op_audit_outputs,
    "audit": Session.op_audit,
}


REHEARSAL_SOURCE = "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"


def rehearse(device: str) -> float:
    """Take the harness's own trivial comparison through every step a job takes; ms spent.

    A freshly forked process pays once for whatever it touches first: copy-on-write pages of
    the zygote's heap, pydantic's and torch's lazy set-up, the kernels a job's bookkeeping
    launches (input generation, fingerprints, the comparison), memory files. Paid here, before
    the worker says it is ready, none of it lands in a job's time. No user code is involved,
    and nothing of the rehearsal stays: its sessions, modules and files are dropped.
    """
    started = time.perf_counter()
    home = Path.cwd()
    stage = home / ".rehearsal"
    job = {"job_id": "rehearsal", "kind": "compare", "device": device, "cache_dir": str(stage),
           "num_correct_trials": 1}
    kernel = {"source_code": REHEARSAL_SOURCE, "kernel_type": "torch",
              "io": {"args": [{"name": "x", "type": "tensor", "role": "input",
                               "tensor_spec": {"shape": [256], "dtype": "float32"}}]}}
    job.update(kernel=kernel, ref_kernel=kernel)
    fds: list[int] = []
    try:
        stage.mkdir(exist_ok=True)
        os.chdir(stage)
        ref, custom = Session(device), Session(device)
        ref.op_load({"job": job, "role": "ref"}, [])
        custom.op_load({"job": job, "role": "custom"}, [])
        trial = ref.op_ref_trial({"trial": 0}, [])
        fds += trial.pop("_fds")
        ran = custom.op_custom_trial({"trial": 0, "inputs": trial["inputs"]}, fds[:1])
        fds += ran.pop("_fds")
        verdict = ref.op_check({"trial": 0, "outputs": ran["outputs"],
                                "inputs_after": ran["inputs_after"]}, fds[-1:])
        if verdict.get("problem") is not None:
            raise RuntimeError(f"the rehearsal's comparison failed: {verdict['problem']}")
        ref.op_evaluate({"profile": False}, [])
    except Exception:  # noqa: BLE001 - a job would meet the same fault and report it
        traceback.print_exc()
    finally:
        for fd in fds:
            _close(fd)
        os.chdir(home)
        for name in [n for n in sys.modules if n.startswith("kernel_")]:
            del sys.modules[name]
        shutil.rmtree(stage, ignore_errors=True)
        if device == "cuda":
            import torch

            from validation import transfer

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            transfer.peak_device_export_bytes = 0
    return (time.perf_counter() - started) * 1e3


def serve(chan: Channel, request: dict[str, Any]) -> int:
    """Get ready without user code, then obey the server until told to exit."""
    device = os.environ.get(DEVICE_ENV, "cpu")
    forked_ms = (time.monotonic() - float(request.get("requested_at", time.monotonic()))) * 1e3
    started = time.perf_counter()
    prepare_process(device)
    context_ms = (time.perf_counter() - started) * 1e3
    session = Session(device)
    timer_ms = (time.perf_counter() - started) * 1e3 - context_ms
    rehearsal_ms = rehearse(device)
    startup = {"fork_sandbox_ms": round(forked_ms, 1), "context_ms": round(context_ms, 1),
               "timer_ms": round(timer_ms, 1),
               "rehearsal_ms": round(rehearsal_ms, 1)}
    # Bound before any user code: a kernel that patches Channel (or json, or sockets) later
    # cannot rewrite what this loop sends. The server still checks every reply.
    send, recv, close = chan.send, chan.recv, _close
    release = session.release_cached_memory
    ops = dict(OPS)
    send({"ready": True, "pid": os.getpid(), "startup": startup})
    while True:
        try:
            msg, fds = recv()
        except ChannelClosed:
            return 0
        op = msg.get("op")
        if op == "exit":
            return 0
        handler = ops.get(str(op))
        try:
            reply = handler(session, msg, fds) if handler else {"error": f"unknown op {op!r}"}
        except Exception:  # noqa: BLE001 - a fault of the harness, reported as such
            reply = {"error": "internal error in the worker:\n" + traceback.format_exc()}
        finally:
            for fd in fds:
                close(fd)
        out_fds: list[int] = reply.pop("_fds", [])  # type: ignore[assignment]
        send(reply, out_fds)
        for fd in out_fds:
            close(fd)
        if session.release_after_reply:
            session.release_after_reply = False
            release()


# ---- helpers ---------------------------------------------------------------------------------


def _num_trials(msg: dict[str, Any]) -> int | None:
    """The request's sample count, or None for the adaptive stopping rule."""
    value = msg.get("num_trials")
    return None if value is None else int(value)


def runtime_message(exc: BaseException, device: str) -> str:
    from compilation.base import user_traceback

    text = user_traceback(exc)
    if type(exc).__name__ == "OutOfMemoryError" and device == "cuda":
        import torch

        free, total = torch.cuda.mem_get_info()
        text += (f"\nthe problem does not fit on this GPU: {free} bytes free of {total} "
                 "(the message above names the allocation that failed)")
    return text


def check_plain_tensors(outputs: list[Any]) -> None:
    """Outputs must be plain tensors: a subclass could compute lazily or lie when compared."""
    import torch

    for t in outputs:
        if type(t) not in (torch.Tensor, torch.nn.Parameter):
            raise TypeError(f"the kernel returned a {type(t).__module__}.{type(t).__name__}; "
                            "outputs must be plain torch.Tensor objects")


def received_input_values(args: Any) -> list[Any]:
    """The values of ``args`` the kernel reads (every value without specs)."""
    if args.specs is None:
        return list(args.values)
    return [v for v, s in zip(args.values, args.specs) if s.role in ("input", "inout")]


def received_input_tensors(args: Any) -> list[tuple[Any, bool]]:
    """Input tensors in order, each with whether it must be unchanged after the call."""
    if args.specs is None:
        return [(t, True) for t in _tensors(args.values)]
    return [(v, s.role == "input") for v, s in zip(args.values, args.specs)
            if s.type == "tensor" and s.role in ("input", "inout")]


def tensor_positions(args: Any, roles: tuple[str, ...]) -> list[int]:
    """Indices (among the tensors of ``args``, in order) of tensors with one of ``roles``."""
    if args.specs is None:
        return list(range(len(_tensors(args.values))))
    positions, index = [], 0
    for value, spec in zip(args.values, args.specs):
        if _is_tensor(value):
            if spec.role in roles:
                positions.append(index)
            index += 1
    return positions


def _tensors(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if _is_tensor(v):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend(_tensors(list(v)))
    return out


def _is_tensor(v: Any) -> bool:
    import torch

    return isinstance(v, torch.Tensor)


FINGERPRINT_CHUNK = 1 << 24


def fingerprint(t: Any) -> list[int]:
    """Two integer sums over a tensor's bytes, on its device (equal bytes, equal prints).

    Used to tell whether a call changed a tensor without moving it off the device: the
    plain sum and a position-weighted sum of its 32-bit words (bytes when the size is not a
    multiple of 4), accumulated in int64 with wrap-around.
    """
    import torch

    flat = t.detach().contiguous().reshape(-1)
    raw = flat.view(torch.uint8)
    words = raw.view(torch.int32) if raw.numel() % 4 == 0 else raw
    total, weighted = 0, 0
    for lo in range(0, words.numel(), FINGERPRINT_CHUNK):
        chunk = words[lo:lo + FINGERPRINT_CHUNK].to(torch.int64)
        weights = torch.arange(lo + 1, lo + chunk.numel() + 1, dtype=torch.int64, device=chunk.device)
        total += int(chunk.sum().item())
        weighted += int((chunk * weights).sum().item())
    return [total & 0xFFFFFFFFFFFFFFFF, weighted & 0xFFFFFFFFFFFFFFFF, int(words.numel())]


AUDIT_NORM_SLACK = 10.0  # a sampled output's relative-norm check: 10x the trials' limit


def audited_difference(plan: Any, got: list[Any], want: list[Any], atol: float | None,
                       rtol: float | None) -> str | None:
    """What differs between a timed sample's kept outputs (``plan``: per output its shape and
    whether it was sampled, then ``got``: whole tensors, or values and flat positions) and
    the reference's outputs ``want``; None if nothing does."""
    import torch

    from validation.compare import compare_outputs, compare_tensor, describe

    if not isinstance(plan, list) or not all(isinstance(p, dict) for p in plan):
        return "the kernel's process described its timed sample's outputs wrongly"
    if not any(p.get("sampled") for p in plan):
        return compare_outputs(got, want, atol, rtol)
    if len(plan) != len(want):
        return (f"the timed call returned {len(plan)} output(s) but the reference "
                f"{len(want)}")
    at = 0
    for i, (part, ref) in enumerate(zip(plan, want)):
        label = f"output {i}" if len(want) > 1 else "output"
        if not part.get("sampled"):
            if at >= len(got):
                return "the kernel's process handed over fewer outputs than it described"
            problem = compare_tensor(got[at], ref, atol, rtol)
            at += 1
        else:
            if at + 1 >= len(got):
                return "the kernel's process handed over fewer outputs than it described"
            values, positions = got[at], got[at + 1]
            at += 2
            if list(part.get("shape") or []) != list(ref.shape):
                problem = f"shape mismatch: expected {list(ref.shape)}, got {part.get('shape')}"
            elif values.dtype != ref.dtype:
                problem = f"dtype mismatch: expected {describe(ref)}, got {values.dtype}"
            elif positions.dtype != torch.int64 or positions.dim() != 1 \
                    or positions.numel() != values.numel() or positions.numel() == 0 \
                    or int(positions.min()) < 0 or int(positions.max()) >= ref.numel():
                problem = "the sampled positions of the timed sample's outputs are not valid"
            else:
                picked = ref.reshape(-1).index_select(0, positions.to(ref.device))
                problem = compare_tensor(values, picked, atol, rtol, AUDIT_NORM_SLACK)
                if problem is not None:
                    problem = (f"{values.numel()} elements sampled at random from "
                               f"{describe(ref)}: {problem}")
        if problem is not None:
            return f"{label}: {problem}"
    return None


def tensor_bytes(values: Any) -> int:
    return sum(t.numel() * t.element_size() for t in _tensors(list(values)))


def describe_tensor(t: Any) -> str:
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def probe(out: Path) -> None:
    """Write what this worker environment can do: device, GPUs, available kernel types."""
    from profiling.gpu_state import nvml_uuid

    info: dict[str, Any] = {"cuda": False, "gpus": [], "torch": None, "errors": []}
    try:
        import torch

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["cuda"] = True
            for i in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(i)
                uuid = str(getattr(props, "uuid", "") or "")
                info["gpus"].append({
                    "id": i, "name": props.name, "memory_total_mb": props.total_memory // 2**20,
                    "uuid": nvml_uuid(uuid) if uuid else None,
                })
                info.setdefault("capability", f"{props.major}.{props.minor}")
    except Exception as exc:  # noqa: BLE001 - the server reports this in /health
        info["errors"].append(f"torch: {exc}")
    write_atomic(out, json.dumps(info))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--probe", type=Path, required=True)
    args = parser.parse_args(argv)
    probe(args.probe)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
