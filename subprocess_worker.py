"""The worker: one child process runs one job, then exits.

    python subprocess_worker.py --job <jobdir>/job_<id>_request.json   run that job now
    python subprocess_worker.py --spare                                warm up, then read
                                                                       one job path from stdin
    python subprocess_worker.py --probe <file>                         write device info

The parent pins the worker to its GPU with CUDA_VISIBLE_DEVICES and tells it the device
with KES_DEVICE. The request file holds a :class:`WorkerJob`; the result is written as a
:class:`WorkerResult` to ``job_<id>_result.json`` (temp file, then rename, so the parent
never reads half a result). Before each stage the worker records it in ``job_<id>_stage``,
so that if user code kills the process, the parent can say where it died.

Order inside a comparison: the reference is compiled, run on every trial's inputs and timed
*before* the custom source is imported, so nothing the custom module does at import time
(flags such as TF32, monkeypatching) can change the reference's outputs or timings.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from shared.job_files import job_paths, write_atomic, write_stage
from shared.models import (
    KernelExecResult,
    Outcome,
    RuntimeStats,
    WorkerJob,
    WorkerResult,
    WorkerStage,
)

DEVICE_ENV = "KES_DEVICE"


# ---- the pipeline -----------------------------------------------------------------------------


class Pipeline:
    """Runs one :class:`WorkerJob` through compile → validate → profile."""

    def __init__(self, job: WorkerJob, stage_file: Path | None = None) -> None:
        self.job = job
        self.stage_file = stage_file
        self.work_dir = Path(job.work_dir)
        self.device = job.device

    def stage(self, name: WorkerStage, role: str = "") -> None:
        if self.stage_file is not None:
            write_stage(self.stage_file, name, role)

    def run(self) -> WorkerResult:
        if self.job.kind == "compare":
            return self.compare()
        return WorkerResult(kernel_exec_result=self.evaluate(profile=self.job.kind == "evaluate"))

    # -- steps shared by both kinds

    def compile(self, role: str, reference: Any = None) -> tuple[Any, KernelExecResult | None]:
        from compilation.base import CompileContext, KernelError, user_traceback
        from compilation.registry import get_backend

        kernel = self.job.ref_kernel if role == "ref" else self.job.kernel
        assert kernel is not None
        self.stage("compile", role)
        ctx = CompileContext(
            device=self.device, work_dir=self.work_dir, cache_dir=Path(self.job.cache_dir),
            role=role,
            fallback_init_inputs=getattr(getattr(reference, "module", None), "get_init_inputs", None),
        )
        try:
            return get_backend(kernel.kernel_type).compile(kernel, ctx), None
        except KernelError as exc:
            return None, failed(Outcome.COMPILE_ERROR, compilation_error=str(exc))
        except Exception as exc:  # a backend let a user-code error through: still the kernel's
            return None, failed(Outcome.COMPILE_ERROR, compilation_error=user_traceback(exc))

    def sync(self) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()

    def call(self, exe: Any, args: Any) -> list[Any]:
        outputs = exe.run(args)
        self.sync()
        return outputs

    def time(self, exe: Any, args: Any, role: str) -> RuntimeStats:
        from profiling.timer import time_kernel

        self.stage("profile", role)
        prepare = getattr(exe, "prepare", None)
        call = prepare(args) if prepare is not None else (lambda: exe.run(args))
        return time_kernel(call, self.device, self.job.num_trials)

    def device_metadata(self, exe: Any = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"device": self.device, "gpu_id": self.job.gpu_id}
        if self.device == "cuda":
            import torch

            meta["gpu_type"] = torch.cuda.get_device_name(0)
        else:
            meta["gpu_type"] = None
            meta["timing_note"] = "CPU mode: timings are CPU wall-clock times, not GPU times"
        meta["device_metrics"] = None
        if exe is not None and getattr(exe, "artifacts", None):
            meta["artifacts"] = dict(exe.artifacts)
        return meta

    # -- /evaluate and validate

    def evaluate(self, profile: bool) -> KernelExecResult:
        from compilation.base import InputError, KernelError, user_traceback

        exe, failure = self.compile("kernel")
        if failure is not None:
            return failure
        self.stage("validate", "kernel")
        try:
            args = exe.make_inputs(0)
        except InputError as exc:
            return failed(Outcome.COMPILE_ERROR, compilation_error=str(exc))
        try:
            outputs = self.call(exe, args.clone())
        except KernelError as exc:
            return failed(Outcome.COMPILE_ERROR, compilation_error=str(exc))
        except Exception as exc:
            return failed(Outcome.RUNTIME_ERROR, compiled=True, runtime_error=runtime_message(exc))
        result = KernelExecResult(
            outcome=Outcome.SUCCESS, compiled=True, metadata=self.device_metadata(exe)
        )
        result.metadata["outputs"] = [describe_tensor(t) for t in outputs]
        if profile:
            try:
                stats = self.time(exe, args, "kernel")
            except Exception as exc:
                return failed(
                    Outcome.RUNTIME_ERROR, compiled=True,
                    runtime_error="failed while timing: " + user_traceback(exc),
                )
            result.runtime, result.runtime_stats = stats.mean, stats
        return result

    # -- /compare

    def compare(self) -> WorkerResult:
        from compilation.base import InputError, KernelError, share_inputs
        from validation.compare import compare_outputs

        ref, failure = self.compile("ref")
        if failure is not None:
            return WorkerResult(ref_exec_result=failure, error="the reference kernel failed to compile")
        self.stage("validate", "ref")
        pristine, ref_outputs, ref_mutates = [], [], False
        try:
            for trial in range(self.job.num_correct_trials):
                args = ref.make_inputs(trial)
                pristine.append(args.clone())
                ref_outputs.append([t.detach().clone() for t in self.call(ref, args)])
                ref_mutates |= inputs_changed(pristine[-1], args) is not None
            ref_stats = self.time(ref, pristine[0].clone(), "ref")
        except Exception as exc:
            ref_result = failed(Outcome.RUNTIME_ERROR, compiled=True, runtime_error=runtime_message(exc))
            return WorkerResult(ref_exec_result=ref_result, error="the reference kernel failed to run")
        ref_result = KernelExecResult(
            outcome=Outcome.SUCCESS, compiled=True, runtime=ref_stats.mean,
            runtime_stats=ref_stats, metadata=self.device_metadata(ref),
        )

        custom, failure = self.compile("custom", reference=ref)
        if failure is not None:
            return WorkerResult(kernel_exec_result=failure, ref_exec_result=ref_result)
        self.stage("validate", "custom")

        def custom_args(trial: int) -> Any:
            if custom.io is None:
                return pristine[trial].clone()
            return share_inputs(custom.make_inputs(trial), pristine[trial])

        for trial in range(self.job.num_correct_trials):
            try:
                args = custom_args(trial)
            except InputError as exc:
                return WorkerResult(
                    kernel_exec_result=failed(Outcome.COMPILE_ERROR, compilation_error=str(exc)),
                    ref_exec_result=ref_result,
                )
            before = args.clone()
            try:
                outputs = self.call(custom, args)
            except KernelError as exc:
                return WorkerResult(
                    kernel_exec_result=failed(Outcome.COMPILE_ERROR, compilation_error=str(exc)),
                    ref_exec_result=ref_result,
                )
            except Exception as exc:
                return WorkerResult(
                    kernel_exec_result=failed(
                        Outcome.RUNTIME_ERROR, compiled=True, runtime_error=runtime_message(exc)
                    ),
                    ref_exec_result=ref_result,
                )
            problem = compare_outputs(outputs, ref_outputs[trial], self.job.atol, self.job.rtol)
            if problem is None and not ref_mutates:
                problem = inputs_changed(before, args)
            if problem is not None:
                return WorkerResult(
                    kernel_exec_result=failed(
                        Outcome.INCORRECT, compiled=True, correctness=False,
                        validation_error=f"correctness trial {trial + 1} of "
                        f"{self.job.num_correct_trials}: {problem}",
                    ),
                    ref_exec_result=ref_result,
                )
        try:
            stats = self.time(custom, custom_args(0), "custom")
        except Exception as exc:
            return WorkerResult(
                kernel_exec_result=failed(
                    Outcome.RUNTIME_ERROR, compiled=True, correctness=True,
                    runtime_error="failed while timing: " + runtime_message(exc),
                ),
                ref_exec_result=ref_result,
            )
        result = KernelExecResult(
            outcome=Outcome.SUCCESS, compiled=True, correctness=True, runtime=stats.mean,
            runtime_stats=stats, metadata=self.device_metadata(custom),
        )
        result.metadata["speedup"] = ref_stats.mean / stats.mean if stats.mean > 0 else None
        return WorkerResult(kernel_exec_result=result, ref_exec_result=ref_result)


def failed(outcome: Outcome, compiled: bool = False, **fields: Any) -> KernelExecResult:
    return KernelExecResult(outcome=outcome, compiled=compiled, **fields)


def runtime_message(exc: BaseException) -> str:
    from compilation.base import user_traceback

    return user_traceback(exc)


def describe_tensor(t: Any) -> str:
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"


def inputs_changed(before: Any, after: Any) -> str | None:
    """A message if a call wrote into a tensor it was given as an input."""
    import torch

    specs = after.specs
    for i, (old, new) in enumerate(zip(before.values, after.values)):
        if not isinstance(new, torch.Tensor):
            continue
        if specs is not None and specs[i].role != "input":
            continue
        if not torch.equal(old.to(new.device), new) and not (
            new.dtype.is_floating_point and torch.equal(old.isnan(), new.isnan())
            and torch.equal(old.nan_to_num(), new.nan_to_num())
        ):
            name = specs[i].name if specs is not None else f"#{i}"
            return (
                f"the kernel modified its input '{name}', which the reference leaves unchanged "
                "(declare it role 'inout' if writing it is intended)"
            )
    return None


# ---- process entry points -----------------------------------------------------------------


def die_with_parent() -> None:
    """Ask Linux to kill this worker when the server dies, so no job outlives its server."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def prepare_process(device: str) -> None:
    """Import the heavy stack and create the CUDA context before a job arrives."""
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch

    if device == "cuda":
        torch.cuda.init()
        torch.empty(1, device="cuda")
    else:
        # KernelBench sources call .cuda() on inputs and models; on a CPU host that is a no-op.
        torch.Tensor.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]
        torch.nn.Module.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]


def run_job_file(request_path: Path) -> int:
    job = WorkerJob.model_validate_json(request_path.read_text())
    _, result_path, stage_path = job_paths(request_path.parent, job.job_id)
    try:
        result = Pipeline(job, stage_path).run()
    except Exception:
        result = WorkerResult(error="internal error in the worker:\n" + traceback.format_exc())
    write_atomic(result_path, result.model_dump_json())
    write_stage(stage_path, "done")
    return 0


def probe(out: Path) -> None:
    """Write what this worker environment can do: device, GPUs, available kernel types."""
    info: dict[str, Any] = {"cuda": False, "gpus": [], "torch": None, "errors": []}
    try:
        import torch

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["cuda"] = True
            for i in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(i)
                info["gpus"].append(
                    {"id": i, "name": props.name, "memory_total_mb": props.total_memory // 2**20}
                )
    except Exception as exc:  # the server reports this in /health rather than dying
        info["errors"].append(f"torch: {exc}")
    write_atomic(out, json.dumps(info))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--job", type=Path)
    group.add_argument("--spare", action="store_true")
    group.add_argument("--probe", type=Path)
    args = parser.parse_args(argv)
    if args.probe:
        probe(args.probe)
        return 0
    die_with_parent()
    prepare_process(os.environ.get(DEVICE_ENV, "cpu"))
    if args.spare:
        line = sys.stdin.readline().strip()
        if not line:  # the parent closed our stdin: it no longer needs this spare
            return 0
        request_path = Path(line)
    else:
        request_path = args.job
    return run_job_file(request_path)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: user threads or a poisoned CUDA context can hang it.
    os._exit(code)
