"""Shared fixtures of the compilation tests.

Without a GPU, Triton kernels run in Triton's interpreter, which must be switched on before
any kernel is decorated; the worker does the same in CPU mode.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from compilation.base import CompileContext

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ["TRITON_INTERPRET"] = "1"

DEVICE = "cuda" if HAS_CUDA else "cpu"


@pytest.fixture
def ctx(tmp_path: Path) -> CompileContext:
    """A compile context for this host's device, with its own work and cache directories."""
    return CompileContext(device=DEVICE, work_dir=tmp_path / "job", cache_dir=tmp_path / "cache")


@pytest.fixture
def cpu_ctx(tmp_path: Path) -> CompileContext:
    """A compile context of a server in CPU mode, whatever this host has."""
    return CompileContext(device="cpu", work_dir=tmp_path / "job", cache_dir=tmp_path / "cache")
