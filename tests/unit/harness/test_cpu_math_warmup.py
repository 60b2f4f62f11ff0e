"""Workers inherit oneMKL's vector-math choices made once, single-threaded, in the zygote."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch

from harness import process


def test_every_function_torch_sends_to_mkl_vml_is_warmed() -> None:
    header = Path(torch.__file__).parent / "include" / "ATen" / "cpu" / "vml.h"
    if not header.exists():
        pytest.skip("this torch build ships no ATen headers")
    active = {m.group(1) for m in re.finditer(r"^IMPLEMENT_VML_MKL\((\w+),", header.read_text(),
                                              re.MULTILINE)}
    assert active, "no IMPLEMENT_VML_MKL line found: has vml.h changed its layout?"
    assert active <= set(process.VML_FUNCTIONS), active - set(
        process.VML_FUNCTIONS)


def test_the_zygote_warms_vector_math_before_it_forks(monkeypatch: pytest.MonkeyPatch) -> None:
    from worker_host import zygote

    calls: list[str] = []
    # preload("cpu") sets TRITON_INTERPRET for the zygote; restored after the test.
    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "1"))
    monkeypatch.setattr(process, "warm_cpu_math", lambda: calls.append("warm"))
    zygote.preload("cpu")
    assert calls == ["warm"]
