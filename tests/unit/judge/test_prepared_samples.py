"""The judge's timed samples' inputs made ahead (PrepareSamples), readings taken again, and
the audit's checks read back together: a real judge with a real reference on the CPU, and a
kernel's process played in-process against the judge's slots."""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import judge.session as session_module
from harness.inputs import SampleInputs
from judge.session import PREPARED_BYTES, JudgeSession, prepared_count
from shared.protocol import (
    Audit,
    Audited,
    CallDone,
    CallPurpose,
    Done,
    ExtraFigures,
    Extras,
    KernelTimed,
    Pair,
    PrepareSamples,
    Role,
    TimeKernel,
    TimingReport,
    WarmedUp,
)
from tests.unit.judge.cpu_judge import Slots, clocked, loaded_judge, vector_slots

SECRET = 4242


@dataclass
class Partner:
    """The kernel's process: doubles its input slot (``factor`` on timed samples), and keeps
    a copy of every timed sample's input as it saw it."""

    slots: Slots
    factor: float = 2.0
    seen: list[torch.Tensor] = field(default_factory=list)

    def warm_up(self, quick: bool = False, deadline: float | None = None,
                cores: list[int] | None = None, shares_cores: bool = False) -> WarmedUp:
        return WarmedUp(calls=3, ms=1.0)

    def call(self, purpose: CallPurpose, index: int) -> CallDone:
        x = self.slots.inputs[0]
        if purpose == CallPurpose.SAMPLE:
            self.seen.append(x.clone())
            self.slots.outputs[0].copy_(x * self.factor)
        else:
            self.slots.outputs[0].copy_(x * 2)
        return CallDone(index=index, outputs=[], copied=True)

    def extras(self, message: Extras, deadline: float | None = None) -> ExtraFigures:
        return ExtraFigures(report=TimingReport(method="fake", event_ms=[]))


def judge_for(tmp_path: Path, factor: float = 2.0) -> tuple[JudgeSession, Partner]:
    judge = loaded_judge(tmp_path, SECRET)
    slots = vector_slots(256)
    partner = Partner(slots, factor)
    clocked(judge, partner, slots)
    return judge, partner


def the_samples(judge: JudgeSession, count: int, reading: int = 0) -> list[torch.Tensor]:
    made = SampleInputs(judge.kernel(), SECRET, contextlib.nullcontext, "cpu", reading)
    return [made.values(i)[0].clone() for i in range(count)]


def test_prepared_inputs_are_the_samples_the_timing_run_would_have_made(
        tmp_path: Path) -> None:
    judge, partner = judge_for(tmp_path)
    assert isinstance(judge.handle(PrepareSamples(num_trials=20), []), Done)
    assert judge.prepared is not None and len(judge.prepared.values) == 20
    assert isinstance(judge.handle(TimeKernel(num_trials=20), []), KernelTimed)
    expected = the_samples(judge, 20)
    assert len(partner.seen) == 20
    assert all(torch.equal(got, want) for got, want in zip(partner.seen, expected))
    # and no two samples alike: a copy per sample, not one tensor drawn over
    assert not any(torch.equal(partner.seen[i], partner.seen[i + 1]) for i in range(19))


def test_a_reading_taken_again_draws_new_inputs_even_where_the_first_was_prepared(
        tmp_path: Path) -> None:
    judge, partner = judge_for(tmp_path)
    judge.handle(PrepareSamples(num_trials=20), [])
    judge.handle(TimeKernel(num_trials=20), [])
    first = list(partner.seen)
    partner.seen.clear()
    judge.handle(TimeKernel(num_trials=20), [])
    assert len(partner.seen) == 20
    assert not any(torch.equal(again, before) for again in partner.seen for before in first)
    assert all(torch.equal(got, want)
               for got, want in zip(partner.seen, the_samples(judge, 20, reading=1)))


@pytest.mark.parametrize("prepared", [True, False])
def test_the_audit_checks_every_kept_sample_with_one_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prepared: bool) -> None:
    judge, _ = judge_for(tmp_path)
    if prepared:
        judge.handle(PrepareSamples(num_trials=20), [])
    judge.handle(TimeKernel(num_trials=20), [])
    reads: list[int] = []
    real = session_module.resolve

    def counted(*staged: Any) -> list[Any]:
        reads.append(len(staged))
        return real(*staged)

    monkeypatch.setattr(session_module, "resolve", counted)
    audited = judge.handle(Audit(), [])
    assert isinstance(audited, Audited) and audited.problem is None, audited
    assert audited.skipped is None and len(audited.checked) == 8
    assert len(reads) == 1


@pytest.mark.parametrize("prepared", [True, False])
def test_the_audit_names_a_kept_sample_the_kernel_got_wrong(tmp_path: Path,
                                                             prepared: bool) -> None:
    judge, _ = judge_for(tmp_path, factor=3.0)  # right on trials, wrong when timed
    if prepared:
        judge.handle(PrepareSamples(num_trials=20), [])
    judge.handle(TimeKernel(num_trials=20), [])
    audited = judge.handle(Audit(), [])
    assert isinstance(audited, Audited) and audited.problem is not None
    assert audited.wrong_sample == audited.checked[0]
    assert "differ beyond" in audited.problem


def test_the_audit_says_so_when_inputs_made_again_differ_from_the_sample_as_it_ran(
        tmp_path: Path) -> None:
    judge, _ = judge_for(tmp_path)
    judge.handle(TimeKernel(num_trials=20), [])
    assert judge.run is not None
    judge.run.kept.kept[3].input_prints = [[1, 2, 3]]
    audited = judge.handle(Audit(), [])
    assert isinstance(audited, Audited) and audited.problem is None
    assert audited.skipped is not None and "not reproducible" in audited.skipped


def test_inputs_are_made_ahead_only_as_far_as_their_memory_budget() -> None:
    assert prepared_count(None, 1024) == 20  # the adaptive rule's least
    assert prepared_count(100, 1024) == 100
    assert prepared_count(100, PREPARED_BYTES // 10) == 10
    assert prepared_count(20, PREPARED_BYTES + 1) == 0


def test_no_prepared_inputs_outlive_their_pairing(tmp_path: Path) -> None:
    judge, _ = judge_for(tmp_path)
    judge.handle(PrepareSamples(num_trials=5), [])
    judge.partner = SimpleNamespace(close=lambda: None)  # type: ignore[assignment]
    judge.arena = SimpleNamespace(close=lambda: None)  # type: ignore[assignment]
    judge.unpair(session_module.Unpair(), [])
    assert judge.prepared is None and judge.readings == 0 and judge.run_inputs is None


def next_pairing(judge: JudgeSession, partner: Partner, job_id: str, keep: bool) -> None:
    """The server ends ``judge``'s pairing (``keep``: Unpair.keep_samples) and pairs it anew
    for job ``job_id`` with ``partner``."""
    judge.partner = SimpleNamespace(close=lambda: None)  # type: ignore[assignment]
    judge.arena = SimpleNamespace(close=lambda: None)  # type: ignore[assignment]
    judge.unpair(session_module.Unpair(keep_samples=keep), [])
    assert judge.comparison is not None
    job = judge.comparison.model_copy(update={"job_id": job_id})
    ours, theirs = socket.socketpair()
    with ours, theirs:
        judge.pair(Pair(role=Role.JUDGE, secret=SECRET + 1, job=job), [os.dup(ours.fileno())])
    judge.partner.close()
    clocked(judge, partner, partner.slots)


def test_the_jobs_next_pairing_is_timed_on_the_inputs_its_last_pairing_kept(
        tmp_path: Path) -> None:
    judge, reference = judge_for(tmp_path)
    judge.handle(PrepareSamples(num_trials=20), [])
    judge.handle(TimeKernel(num_trials=20), [])
    candidate = Partner(vector_slots(256))
    next_pairing(judge, candidate, judge.comparison.job_id if judge.comparison else "", True)
    assert isinstance(judge.handle(PrepareSamples(num_trials=20), []), Done)
    assert isinstance(judge.handle(TimeKernel(num_trials=20), []), KernelTimed)
    assert len(candidate.seen) == 20
    assert all(torch.equal(a, b) for a, b in zip(candidate.seen, reference.seen))
    # the audit reads them back as the candidate's samples
    audited = judge.handle(Audit(), [])
    assert isinstance(audited, Audited) and audited.problem is None and audited.skipped is None


@pytest.mark.parametrize("case", ["another job", "not kept", "read again"])
def test_kept_inputs_serve_only_the_same_jobs_next_pairing_after_one_reading(
        tmp_path: Path, case: str) -> None:
    judge, reference = judge_for(tmp_path)
    judge.handle(PrepareSamples(num_trials=20), [])
    judge.handle(TimeKernel(num_trials=20), [])
    if case == "read again":  # (the second reading's inputs were drawn afresh)
        judge.handle(TimeKernel(num_trials=20), [])
    candidate = Partner(vector_slots(256))
    same = judge.comparison.job_id if judge.comparison else ""
    next_pairing(judge, candidate, "other" if case == "another job" else same,
                 keep=case != "not kept")
    judge.handle(PrepareSamples(num_trials=20), [])
    judge.handle(TimeKernel(num_trials=20), [])
    assert not any(torch.equal(a, b) for a in candidate.seen for b in reference.seen[:20])
