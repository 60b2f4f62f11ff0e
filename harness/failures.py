"""One place that turns an exception raised by user code into the kernel's failure (data)."""

from __future__ import annotations

from compilation.base import KernelError, user_traceback
from shared.models import Outcome
from shared.protocol import Failure


def classify(exc: BaseException, device: str, prefix: str = "") -> Failure:
    """A :class:`~compilation.base.KernelError` is the kernel not fitting (compile error);
    anything else raised while it ran is a runtime error, with the frames of the user's code
    and, for a GPU out of memory, how much memory there was."""
    if isinstance(exc, KernelError):
        return Failure(outcome=Outcome.COMPILE_ERROR, message=prefix + str(exc))
    return Failure(outcome=Outcome.RUNTIME_ERROR, message=prefix + runtime_message(exc, device),
                   out_of_memory=out_of_memory(exc))


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a device running out of memory: torch's and
    CuPy's errors, the arena's, and CUDA's own error codes in a driver's message."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if type(exc).__name__ in ("OutOfMemoryError", "DoesNotFit"):
            return True
        if any(code in str(exc) for code in OOM_CODES):
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return False


OOM_CODES = ("CUDA_ERROR_OUT_OF_MEMORY", "cudaErrorMemoryAllocation", "CUDA out of memory")


def runtime_message(exc: BaseException, device: str) -> str:
    text = user_traceback(exc)
    if type(exc).__name__ == "OutOfMemoryError" and device == "cuda":
        import torch

        free, total = torch.cuda.mem_get_info()
        text += (f"\nthe problem does not fit on this GPU: {free} bytes free of {total} "
                 "(the message above names the allocation that failed)")
    return text
