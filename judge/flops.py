"""The reference's work on trial 0's inputs: its FLOPs per dtype and the bytes it must move.

The judge calls :func:`count_work` once per reference, after trial 0's own reference call:
one more call of the reference on the same inputs under
``torch.utils.flop_counter.FlopCounterMode``, which counts the FLOPs of the aten operators it
has formulas for (mm, bmm, addmm, baddbmm, convolution and its backward, scaled dot-product
attention, ...). Elementwise and reduction operators count 0, so a problem made of them reads
as memory-bound. Work done outside torch's dispatcher (a Triton or CUDA reference, a
``load_inline`` extension) is invisible to it.

The counting call never decides a verdict and never fails a job: any error leaves ``flops``
None with the reason. It runs on a copy of the inputs where the reference writes its
arguments (outputs passed in, inputs it mutates), so trial 0's inputs and outputs stay as the
trial made them; the judge puts the module's buffers back after it, as after every trial-0
call. The mode only observes: the operators run as they would without it (a test checks the
outputs are bitwise the same). It costs one reference call, waited for (the judge's clock is
calibrated next, on an idle device), the copy where there is one, and the mode's own dispatch:
0.2-0.8 ms a call on a 2-core CPU host, where the worker's fork server has imported what the
mode needs (``torch._dynamo``).
"""

from __future__ import annotations

import time
import warnings
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from compilation.base import Arguments, ExecutableKernel
from harness.tensors import tensors_of
from shared.observations import ProblemWork

# torch dtypes by the key of profiling.gpu_peaks' table
_DTYPE_KEYS = {
    torch.float64: "fp64", torch.float32: "fp32", torch.float16: "fp16",
    torch.bfloat16: "bf16", torch.int8: "int8", torch.uint8: "int8",
    **{getattr(torch, name): "fp8" for name in (
        "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
       if hasattr(torch, name)},
}


def count_work(exe: ExecutableKernel, args: Arguments, outputs: list[torch.Tensor], *,
               writes_args: bool, kernel_type: str, device: str,
               sync: Callable[[], None]) -> ProblemWork:
    """The reference ``exe``'s work on ``args`` (trial 0's), whose call returned ``outputs``.

    ``writes_args``: the reference writes its arguments (the count then runs on a copy);
    ``kernel_type``: the reference's (torch sees the work of ``torch`` sources only);
    ``sync``: waits for the device (the count's GPU work is over when this returns).
    """
    started = time.perf_counter()
    try:
        work = _bytes(exe, args, outputs)
    except Exception as exc:  # noqa: BLE001 - a diagnostic: never the job's failure
        return ProblemWork(reason=f"the reference's bytes could not be counted: {_said(exc)}")
    try:
        by_dtype, total = _flops(exe, args.clone() if writes_args else args, device, sync)
    except Exception as exc:  # noqa: BLE001 - user code ran: anything may come out
        work.reason = f"the reference's FLOPs could not be counted: {_said(exc)}"
        return _timed(work, started)
    if total == 0 and kernel_type != "torch":
        work.reason = (f"the reference is a {kernel_type} kernel: torch's FLOP counter sees "
                       "only the work of torch operators")
        return _timed(work, started)
    work.flops = total
    work.flops_by_dtype = by_dtype
    if by_dtype:
        work.dtype, work.dtype_source = max(by_dtype, key=by_dtype.__getitem__), "counted"
    return _timed(work, started)


def _bytes(exe: ExecutableKernel, args: Arguments, outputs: list[torch.Tensor]) -> ProblemWork:
    read = args.input_tensors() if args.specs is not None else tensors_of(args.values)
    state = _module_state(exe)
    inputs_dtype = _dominant(read)
    return ProblemWork(
        read_bytes=_unique_bytes(read + state), written_bytes=_unique_bytes(outputs),
        state_bytes=_unique_bytes(state), dtype=inputs_dtype,
        dtype_source="inputs" if inputs_dtype is not None else None)


def _module_state(exe: ExecutableKernel) -> list[torch.Tensor]:
    fn = getattr(exe, "fn", None)
    if not isinstance(fn, torch.nn.Module):
        return []
    return [t.detach() for t in (*fn.parameters(), *fn.buffers())]


def _unique_bytes(tensors: list[torch.Tensor]) -> int:
    """Bytes of ``tensors``, each counted once (a tensor passed twice is read once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        key = (t.data_ptr(), nbytes)
        if nbytes and key not in seen:
            seen.add(key)
            total += nbytes
    return total


def _dominant(tensors: list[torch.Tensor]) -> str | None:
    """The dtype key most of ``tensors``' bytes are in (floating ones first)."""
    floating = [t for t in tensors if t.is_floating_point()] or tensors
    weight: dict[str, int] = defaultdict(int)
    for t in floating:
        weight[dtype_key(t.dtype)] += t.numel() * t.element_size()
    return max(weight, key=weight.__getitem__) if weight else None


def dtype_key(dtype: torch.dtype, op: str = "", device: str = "cpu") -> str:
    """``dtype``'s key in the peak table; float32 ops on a GPU read ``tf32`` where torch lets
    them use TF32 (convolutions: cuDNN's flag; matmuls: the float32 matmul precision)."""
    key = _DTYPE_KEYS.get(dtype, str(dtype).removeprefix("torch."))
    if key != "fp32" or device != "cuda" or not op:
        return key
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (newer torch deprecates the flags it still honours)
        tf32 = torch.backends.cudnn.allow_tf32 if "conv" in op else \
            torch.get_float32_matmul_precision() != "highest"
    return "tf32" if tf32 else key


def _flops(exe: ExecutableKernel, args: Arguments, device: str,
           sync: Callable[[], None]) -> tuple[dict[str, int], int]:
    """(FLOPs by dtype key, total) of one call of ``exe`` on ``args``."""
    by_dtype: dict[str, int] = defaultdict(int)
    counter = FlopCounterMode(display=False)
    registry = getattr(counter, "flop_registry", None)
    if isinstance(registry, dict):
        for op, formula in list(registry.items()):
            registry[op] = _tallying(formula, str(op), device, by_dtype)
    with counter:
        exe.run(args)
        sync()
    total = int(counter.get_total_flops())
    counted = {k: int(v) for k, v in by_dtype.items() if v}
    if sum(counted.values()) != total:  # the formulas were not reached through the registry
        counted = {}
    return counted, total


def _tallying(formula: Callable[..., int], op: str, device: str,
              by_dtype: dict[str, int]) -> Callable[..., int]:
    """``formula`` (the counter's FLOPs of one ``op`` call), adding its count to ``by_dtype``
    under the dtype of the op's first matrix operand."""

    def counted(*args: Any, **kwargs: Any) -> int:
        flops = formula(*args, **kwargs)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        operand = next((t for t in tensors if t.dim() >= 2), tensors[0] if tensors else None)
        if operand is not None and flops:
            by_dtype[dtype_key(operand.dtype, op, device)] += int(flops)
        return flops

    return counted


def _timed(work: ProblemWork, started: float) -> ProblemWork:
    work.count_ms = round((time.perf_counter() - started) * 1e3, 3)
    return work


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:300]}"
