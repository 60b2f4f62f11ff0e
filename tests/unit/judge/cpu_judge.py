"""A real judge on the CPU with a real reference loaded (``x * 2`` over a float32 vector drawn
from ``randn``), for tests of the judge's own steps against a kernel's process played
in-process."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from harness.timer import Timer
from judge.handover import Clock, write_inputs
from judge.session import JudgeSession
from shared.models import WorkerJob
from shared.protocol import CallDone, CallPurpose, Failure, Load, Role

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
    layout: Any = field(default_factory=lambda: SimpleNamespace(where="host"))


def vector_slots(size: int) -> Slots:
    """:class:`Slots` of one zeroed vector of ``size`` each."""
    return Slots([torch.zeros(size)], [torch.zeros(size)])


class SlotsHandOver:
    """The hand-over played in-process (``partner.call`` answers at once, having run): the
    inputs written into the slots, the outputs copied into the judge's holder; a sample's
    interval reads ``sample_ms``, a null call's ``null_ms``."""

    def __init__(self, partner: Any, slots: Slots, sample_ms: float = 0.7,
                 null_ms: float = 0.2) -> None:
        self.partner, self.slots = partner, slots
        self.holder = [torch.empty_like(slot) for slot in slots.outputs]
        self.released_early = 0
        self.sample_ms, self.null_ms = sample_ms, null_ms
        self.seqs: list[int] = []

    def call(self, values: list[Any], purpose: CallPurpose, index: int, seq: int,
             deadline: float) -> tuple[float, CallDone]:
        self.seqs.append(seq)
        write_inputs(self.slots, values)  # type: ignore[arg-type]
        done = self.partner.call(purpose, index)
        for mine, slot in zip(self.holder, self.slots.outputs):
            mine.copy_(slot)
        return (self.sample_ms if purpose == CallPurpose.SAMPLE else self.null_ms), done


def clocked(judge: JudgeSession, partner: Any, slots: Slots, **hand_over: float) -> None:
    """``judge`` paired with ``partner`` over ``slots``, its clock a :class:`SlotsHandOver`,
    calibrated."""
    judge.partner, judge.arena = partner, slots  # type: ignore[assignment]
    judge.clock = Clock(partner, slots,  # type: ignore[arg-type]
                        SlotsHandOver(partner, slots, **hand_over))
    judge.calibration = [hand_over.get("null_ms", 0.2)] * 16
