"""The process Nsight Compute profiles: one call of a job's kernel inside an NVTX range.

    python -m kernel_side.ncu_target <job_request.json> <role>

``job_request.json`` holds a :class:`WorkerJob`; ``role`` is ``kernel`` or ``custom`` (the
job's ``kernel``) or ``ref`` (its ``ref_kernel``). The kernel is compiled with the same
backends the worker uses, its inputs are made for trial 0 (a custom kernel without its own
IOContract gets the reference's inputs, as in the worker), it is warmed up outside any range
(JIT, autotuning and library initialisation are not profiled), and then called exactly once
inside the NVTX push/pop range :data:`NVTX_RANGE`, which ``ncu --nvtx-include`` selects.
Nothing is timed here and no L2 flush runs: the job's timings come from the worker's own
pass, never from this process.

Exit status 0 when the call ran; otherwise non-zero with a line starting with
:data:`ERROR_PREFIX` on stderr saying what failed.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from shared.models import WorkerJob
from shared.ncu_target import ERROR_PREFIX, NVTX_RANGE

WARMUP_CALLS = 3
ROLES = ("kernel", "custom", "ref")
_WHAT = {"kernel": "the kernel", "custom": "the custom kernel", "ref": "the reference kernel"}

EXIT_USAGE = 2
EXIT_KERNEL_FAILED = 3


class TargetError(Exception):
    """The kernel could not be compiled or run; the message says why."""


def prepare_call(job: WorkerJob, role: str) -> Callable[[], Any]:
    """Compile the kernel of ``role``, build its inputs, and return the bare call to profile."""
    from compilation.base import KernelError, share_inputs

    if role == "ref":
        if job.ref_kernel is None:
            raise TargetError("role 'ref' but the job has no reference kernel")
        exe = _compile(job, job.ref_kernel, "ref")
        args = exe.make_inputs(0)
    elif job.kind == "compare" and job.ref_kernel is not None:
        # As in the worker: the reference is compiled first and the custom kernel runs on the
        # reference's inputs (and may borrow its get_init_inputs).
        ref = _compile(job, job.ref_kernel, "ref")
        ref_args = ref.make_inputs(0)
        init = getattr(getattr(ref, "module", None), "get_init_inputs", None)
        exe = _compile(job, job.kernel, role, fallback_init_inputs=init)
        try:
            own = exe.make_inputs(0) if exe.io is not None else None
            args = ref_args.clone() if own is None else share_inputs(own, ref_args)
        except KernelError as exc:
            raise TargetError(str(exc)) from exc
    else:
        exe = _compile(job, job.kernel, role)
        args = exe.make_inputs(0)
    prepare = getattr(exe, "prepare", None)
    call: Callable[[], Any] = prepare(args) if prepare is not None else (lambda: exe.run(args))
    return call


def _compile(job: WorkerJob, kernel: Any, role: str, **ctx_extra: Any) -> Any:
    from compilation.base import CompileContext, KernelError, user_traceback
    from compilation.registry import get_backend

    ctx = CompileContext(
        device=job.device, work_dir=Path(job.work_dir), cache_dir=Path(job.cache_dir),
        role=role, **ctx_extra,
    )
    try:
        return get_backend(kernel.kernel_type).compile(kernel, ctx)
    except KernelError as exc:
        raise TargetError(f"{_WHAT[role]} did not compile: {exc}") from exc
    except Exception as exc:
        raise TargetError(f"{_WHAT[role]} did not compile: {user_traceback(exc)}") from exc


def run_profiled(call: Callable[[], Any], device: str) -> None:
    """Warm ``call`` up outside any range, then make exactly one call inside the NVTX range."""
    sync = _synchronizer(device)
    for _ in range(WARMUP_CALLS):
        call()
        sync()
    with nvtx_range(NVTX_RANGE, device):
        call()
        sync()


@contextlib.contextmanager
def nvtx_range(name: str, device: str) -> Iterator[None]:
    """A push/pop range in NVTX's default domain (what ``--nvtx-include "name/"`` matches).

    On a CUDA build of torch its NVTX binding is used, else the ``nvtx`` package; on a host
    with neither (a CPU-only test run) the range is a no-op: there is nothing to profile.
    """
    push: Callable[[str], Any] | None = None
    pop: Callable[[], Any] | None = None
    if device == "cuda":
        import torch

        push, pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    else:
        try:
            import nvtx
        except ImportError:
            pass
        else:
            push, pop = (lambda message: nvtx.push_range(message=message)), nvtx.pop_range
    if push is None or pop is None:
        yield
        return
    push(name)
    try:
        yield
    finally:
        pop()


def _synchronizer(device: str) -> Callable[[], None]:
    if device != "cuda":
        return lambda: None
    import torch

    return torch.cuda.synchronize


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[1] not in ROLES:
        print(f"{ERROR_PREFIX}usage: python -m kernel_side.ncu_target <job_request.json> "
              f"{{{'|'.join(ROLES)}}}", file=sys.stderr)
        return EXIT_USAGE
    try:
        job = WorkerJob.model_validate_json(Path(args[0]).read_text())
    except (OSError, ValueError) as exc:
        print(f"{ERROR_PREFIX}cannot read the job file {args[0]}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    role = args[1]
    from worker_host.sandbox import first_for_the_oom_killer

    first_for_the_oom_killer()  # it runs user code: see worker_host.sandbox
    from compilation.base import KernelError, user_traceback

    try:
        call = prepare_call(job, role)
        run_profiled(call, job.device)
    except (TargetError, KernelError) as exc:
        print(f"{ERROR_PREFIX}{exc}", file=sys.stderr)
        return EXIT_KERNEL_FAILED
    except Exception as exc:  # noqa: BLE001 - the kernel's own failure, whatever it raised
        print(f"{ERROR_PREFIX}{_WHAT[role]} failed while running: {user_traceback(exc)}",
              file=sys.stderr)
        return EXIT_KERNEL_FAILED
    print(f"kes_ncu_target: {_WHAT[role]} ran once inside NVTX range '{NVTX_RANGE}'",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
