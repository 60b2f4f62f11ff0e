"""The CPU build stage's process: import a torch_cuda source with ``load_inline`` going through
the content-addressed build cache, and nothing else.

It runs before the job takes a GPU: a failing build is the verdict, with no GPU held.
"""

from __future__ import annotations

from pathlib import Path

from shared.models import Outcome
from shared.protocol import BuildRecord, Failure, Load, Loaded, Message


def build(message: Load, work_dir: Path) -> Message:
    from compilation.base import CompileContext, load_module
    from compilation.torch_backend import python_preset
    from compilation.torch_cuda_backend import CachedLoadInline, ExtensionBuildError

    job = message.job
    loader = CachedLoadInline(Path(job.cache_dir) / "torch_ext")
    ctx = CompileContext(device="cpu", work_dir=work_dir, cache_dir=Path(job.cache_dir),
                         role="build")
    try:
        with loader.installed():
            load_module(job.kernel.source_code, ctx, python_preset())
    except Exception as exc:  # noqa: BLE001
        cause = exc.__cause__ if exc.__cause__ is not None else exc
        if isinstance(cause, ExtensionBuildError):
            return Failure(outcome=Outcome.COMPILE_ERROR, message=str(cause))
        # Anything else (e.g. module code that needs a GPU) is left to the GPU stage.
        return Loaded(deferred=f"{type(exc).__name__}: {exc}"[:500])
    return Loaded(builds=[BuildRecord(name=b.name, cached=b.cached, seconds=round(b.seconds, 3))
                          for b in loader.builds])

