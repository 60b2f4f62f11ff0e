"""A job process's own set-up, before any job: the CUDA context, the CPU's math paths, where
its sources go."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from shared.protocol import SPARE_WARM_ENV, WARM_CUBLAS, WARM_NONE, WORK_DIR_ENV

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


def prepare_process(device: str, build: bool = False) -> None:
    """Create the CUDA context (or set up CPU mode) before any job arrives; on a GPU, warm
    what :data:`SPARE_WARM_ENV` names (``cublas``, the default; ``base``; ``none``).
    A CPU-mode job process is held to its torch threads' cores; a ``build`` process (the
    build stage's: compilers, nothing timed) is not, so nvcc and ninja have the host's cores."""
    import torch

    if device == "cuda":
        torch.cuda.init()
        warm = os.environ.get(SPARE_WARM_ENV, WARM_CUBLAS)
        if warm == WARM_NONE:
            torch.zeros(1, device="cuda")  # the context alone
            torch.cuda.synchronize()
            return
        # What a first kernel would otherwise pay inside its job: the allocator, the RNG,
        # the casts and reductions of each dtype, and (``cublas``) the cuBLAS handle and its
        # half-precision paths.
        torch.manual_seed(0)
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            matrix = torch.randn(64, 64, device="cuda").to(dtype)
            (matrix @ matrix if warm == WARM_CUBLAS else matrix).sum().item()
    else:
        # KernelBench sources call .cuda() on inputs and models; on a CPU host that is a no-op.
        torch.Tensor.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]
        torch.nn.Module.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]
        if not build:
            threads = cpu_threads()
            torch.set_num_threads(threads)
            hold_cpu_mode_process(threads)


def hold_cpu_mode_process(threads: int) -> None:
    """Hold this CPU-mode job process to ``threads`` cores for good
    (:mod:`worker_host.cpu_cores`); where the host refuses the affinity or the seccomp lock,
    the process runs on (pinned, if that much was had) and says so on its output."""
    from worker_host.cpu_cores import CoreHoldError, hold_to_cores

    try:
        hold_to_cores(threads)
    except CoreHoldError as exc:
        print(f"kernel-eval: this job process could not be held to {threads} core(s) "
              f"({exc}): code in it may take more", file=sys.stderr)


def cpu_threads() -> int:
    """The threads a job process's torch uses in CPU mode: ``OMP_NUM_THREADS`` where the
    server's environment sets it, else one; the process is held to as many cores
    (:mod:`worker_host.cpu_cores`).

    A comparison runs two processes on the CPU, and with a team of threads each the
    candidate's team shares the cores with the judge's while the reference's runs alone: an
    identical pair then reads about half as fast (docs/WORKER_DESIGN.md, "The sandbox")."""
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "1")))
    except ValueError:
        return 1


def work_root() -> Path:
    """Where this process writes the sources it loads (``KES_WORK_DIR``: a fixed path in the
    worker's own /tmp where it has one), else its working directory, the scratch."""
    return Path(os.environ.get(WORK_DIR_ENV) or Path.cwd())
