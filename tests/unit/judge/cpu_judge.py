"""A real judge on the CPU with a real reference loaded (``x * 2`` over a float32 vector drawn
from ``randn``), for tests of the judge's own steps against a kernel's process played
in-process."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.timer import Timer
from judge.session import JudgeSession
from shared.models import WorkerJob
from shared.protocol import Failure, Load, Role

SOURCE = "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"


def loaded_judge(tmp_path: Path, secret: int, shape: int = 256) -> JudgeSession:
    """The judge of a comparison of the reference with itself, paired under ``secret`` (no
    partner or arena yet: the test sets them)."""
    kernel = {"source_code": SOURCE, "kernel_type": "torch",
              "io": {"args": [{"name": "x", "type": "tensor", "role": "input",
                               "tensor_spec": {"shape": [shape], "dtype": "float32",
                                               "init": {"kind": "randn"}}}]}}
    job = WorkerJob.model_validate({"job_id": "t", "kind": "compare", "device": "cpu",
                                    "cache_dir": str(tmp_path), "num_correct_trials": 1,
                                    "kernel": kernel, "ref_kernel": kernel})
    judge = JudgeSession("cpu", Timer())
    with contextlib.chdir(tmp_path):
        loaded = judge.load(Load(job=job, role=Role.JUDGE), [])
    assert not isinstance(loaded, Failure), loaded
    judge.comparison, judge.secret = job, secret
    return judge


@dataclass
class Slots:
    """An arena's slots as the judge's clock uses them: one float32 input, one output."""

    inputs: list[torch.Tensor]
    outputs: list[torch.Tensor]


def vector_slots(size: int) -> Slots:
    """:class:`Slots` of one zeroed vector of ``size`` each."""
    return Slots([torch.zeros(size)], [torch.zeros(size)])
