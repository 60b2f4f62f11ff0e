"""Refusing a kernel written in a language that cannot run here, before its source runs
(the languages: :mod:`shared.languages`)."""

from __future__ import annotations

from shared.languages import first_unavailable, imported_languages


def device_capability(device: str) -> str | None:
    """This process's GPU's compute capability ("9.0"), or None on the CPU."""
    if device != "cuda":
        return None
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"{major}.{minor}"


def check_source(source: str, device: str) -> None:
    """Raise a CompileError when ``source`` uses a language that cannot run on ``device``."""
    used = imported_languages(source)
    if not used:  # (the GPU's capability is read only for a source that needs it)
        return
    message = first_unavailable(used, device, device_capability(device))
    if message is not None:
        from compilation.base import CompileError

        raise CompileError(message)
