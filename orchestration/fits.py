"""Whether a job's tensors can fit this host's memory at all, known before it runs.

An IOContract says how large its tensors are. A job process draws them on the CPU first (the
same seed gives the same bits on CPU and GPU), and in CPU mode a comparison holds them several
times over (the judge's copy, the arena both processes map, the kernel's outputs). A problem
that cannot fit the host's memory would only be ended by the kernel's OOM killer, a minute
later and without a word: it is refused up front with the bytes it needs.
"""

from __future__ import annotations

from orchestration import verdicts
from shared.models import KernelCode, WorkerJob, WorkerResult

# How many copies of the contract's tensors a job holds in host memory at once, at most.
COPIES = {"cpu": {"compare": 3.0, "evaluate": 2.0, "validate": 2.0},
          "cuda": {"compare": 1.5, "evaluate": 1.5, "validate": 1.5}}


def contract_bytes(kernel: KernelCode | None) -> int:
    """The bytes of every tensor an IOContract declares (0 without one: get_inputs' sizes are
    known only once it runs)."""
    if kernel is None or kernel.io is None:
        return 0
    total = 0
    for arg in kernel.io.args:
        if arg.type == "tensor" and arg.tensor_spec is not None:
            total += arg.tensor_spec.numel * arg.tensor_spec.dtype.itemsize
    return total


def available_host_bytes(meminfo: str = "/proc/meminfo") -> int | None:
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def too_big_for_the_host(job: WorkerJob, device: str,
                         available: int | None = None) -> WorkerResult | None:
    """The verdict for a job whose declared tensors cannot fit the host's memory, or None."""
    largest = max(contract_bytes(job.kernel), contract_bytes(job.ref_kernel))
    if largest == 0:
        return None
    needed = int(largest * COPIES["cpu" if device != "cuda" else "cuda"][job.kind])
    free = available if available is not None else available_host_bytes()
    if free is None or needed <= free:
        return None
    message = (f"the problem does not fit this host's memory: its IOContract's tensors take "
               f"{largest} bytes, and a {job.kind} holds them about "
               f"{needed / largest:.1f} times over ({needed} bytes) where {free} bytes are "
               "available; nothing was run")
    return verdicts.does_not_fit(message)
