"""A correctness trial's inputs have landed in the arena before the kernel's process is asked
to run on them: that process reads the slots from its own CUDA context, so the judge's copies
into them (asynchronous on a GPU) are waited for first. Seen on the H100 before: trial 0 of a
pairing on a fresh arena that no calibration had written (the judge's kept calibration) read
memory not yet written, and 2 (then 4) of 50 honest relu twins were judged incorrect."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

import judge.trials as trials_module
from harness.tensors import fingerprint
from judge.judging import Trial0
from judge.session import JudgeSession
from shared.protocol import CallDone, Incorrect, Trials, TrialsPassed


class RecordingPartner:
    """The kernel's process, recording the call and computing the relu of the slot as it is."""

    def __init__(self, events: list[str], arena: Any) -> None:
        self.events, self.arena = events, arena

    def call(self, purpose: Any, index: int, hold_ms: float = 0.0) -> CallDone:
        self.events.append("call")
        self.arena.outputs[0].copy_(torch.relu(self.arena.inputs[0]))
        return CallDone(index=index, outputs=[], copied=True)


def judge_with_trial0(events: list[str], monkeypatch: pytest.MonkeyPatch) -> JudgeSession:
    def write_inputs(arena: Any, values: list[Any]) -> None:
        events.append("write")
        arena.inputs[0].copy_(values[0])

    monkeypatch.setattr(trials_module, "write_inputs", write_inputs)
    judge = JudgeSession("cpu", timer=SimpleNamespace(  # type: ignore[arg-type]
        sync=lambda: events.append("sync")))
    x = torch.randn(64)
    judge.trial0 = Trial0(outputs=[torch.relu(x)], mutates=False, prints=[fingerprint(x)],
                          input_bytes=256, output_bytes=256, values=[x])
    judge.arena = SimpleNamespace(inputs=[torch.full((64,), float("nan"))],  # type: ignore
                                  outputs=[torch.zeros(64)])
    judge.comparison = SimpleNamespace(  # type: ignore[assignment]
        atol=1e-5, rtol=1e-5, ref_kernel=SimpleNamespace(io=None), kernel=SimpleNamespace(io=None))
    judge.partner = RecordingPartner(events, judge.arena)  # type: ignore[assignment]
    return judge


def test_trial_zero_waits_for_its_inputs_copy_before_the_kernels_process_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    judge = judge_with_trial0(events, monkeypatch)
    reply = judge.trials(Trials(first=0, count=1), [])
    assert isinstance(reply, TrialsPassed), reply
    assert "call" in events
    before_call = events[:events.index("call")]
    assert "write" in before_call
    assert "sync" in before_call[before_call.index("write"):], events


def test_a_kernel_reading_unwritten_slots_is_what_the_trial_would_call_incorrect(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # what the wait prevents: the same trial, had the copy not landed, fails the twin
    events: list[str] = []
    judge = judge_with_trial0(events, monkeypatch)
    monkeypatch.setattr(trials_module, "write_inputs", lambda arena, values: None)
    reply = judge.trials(Trials(first=0, count=1), [])
    assert isinstance(reply, Incorrect), reply
