"""A reference's process paired beside the candidate's, on the CPU, with real sessions: the
judge and two kernel's processes played in threads over socket pairs (as the worker's
rehearsal plays one), through the protocol's Pair, Calibrate, TimeKernel and Unpair that say
``beside``."""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path

import pytest

from harness.timer import bind
from judge.session import JudgeSession
from kernel_side.session import KernelSession
from shared.channel import Channel
from shared.models import WorkerJob
from shared.protocol import (
    Audit,
    Audited,
    Calibrate,
    Calibrated,
    Done,
    KernelTimed,
    Load,
    Loaded,
    Message,
    Pair,
    PrepareSamples,
    Role,
    TimeKernel,
    Trials,
    TrialsPassed,
    Unpair,
)
from subprocess_worker import REHEARSAL_SOURCE, _serve_pair

KERNEL = {"source_code": REHEARSAL_SOURCE, "kernel_type": "torch",
          "io": {"args": [{"name": "x", "type": "tensor", "role": "input",
                           "tensor_spec": {"shape": [256], "dtype": "float32",
                                           "init": {"kind": "randn"}}}]}}


def job(tmp_path: Path) -> WorkerJob:
    return WorkerJob.model_validate({"job_id": "b", "kind": "compare", "device": "cpu",
                                     "cache_dir": str(tmp_path), "num_correct_trials": 1,
                                     "kernel": KERNEL, "ref_kernel": KERNEL})


def expect(reply: Message, kind: type) -> Message:
    assert isinstance(reply, kind), reply
    return reply


def partner(judge: JudgeSession, the_job: WorkerJob, beside: bool
            ) -> tuple[threading.Thread, KernelSession]:
    """A kernel's process in a thread, paired with ``judge`` (beside the one paired, or as
    the pairing), its code loaded after the judge's calibration; and its session."""
    side = KernelSession("cpu", bind("cpu"))
    ours, theirs = socket.socketpair()
    expect(judge.handle(Pair(role=Role.JUDGE, secret=7, job=the_job, beside=beside),
                        [ours.detach()]), Done)
    thread = threading.Thread(target=_serve_pair, args=(side, Channel(theirs), "cpu"),
                              daemon=True)
    thread.start()
    expect(judge.handle(Calibrate(beside=beside), []), Calibrated)
    expect(side.load(Load(job=the_job, role=Role.KERNEL), []), Loaded)
    return thread, side


def test_a_reference_paired_beside_is_timed_in_turn_and_its_pairing_ends_alone(
        tmp_path: Path) -> None:
    the_job = job(tmp_path)
    judge = JudgeSession("cpu", bind("cpu"))
    with contextlib.chdir(tmp_path):
        expect(judge.load(Load(job=the_job, role=Role.JUDGE), []), Loaded)
        candidate, candidate_side = partner(judge, the_job, beside=False)
        expect(judge.handle(Trials(first=0, count=1), []), TrialsPassed)
        reference, reference_side = partner(judge, the_job, beside=True)
        expect(judge.handle(PrepareSamples(num_trials=6), []), Done)
        timed = expect(judge.handle(TimeKernel(num_trials=6, reference_ms=1.0, beside=True),
                                    []), KernelTimed)
        assert isinstance(timed, KernelTimed) and timed.beside is not None
        assert len(timed.timing.trusted_ms) == len(timed.beside.trusted_ms) == 6
        assert timed.timing.interleaved and timed.beside.interleaved
        assert len(timed.beside.calibration_ms) > 0
        # the two shared their cores: neither polled between calls; the candidate's run's
        # end (its Extras) puts its polling back, the reference's its unpairing
        assert candidate_side.polls and not reference_side.polls
        # the pairing beside ends; the candidate's goes on (its audit, its own unpair)
        expect(judge.handle(Unpair(beside=True), []), Done)
        reference.join(5)
        assert not reference.is_alive() and judge.beside is None and reference_side.polls
        expect(judge.handle(Audit(), []), Audited)
        expect(judge.handle(Unpair(), []), Done)
        candidate.join(5)
        assert not candidate.is_alive()


def test_a_reference_is_paired_beside_only_once_a_candidate_is_paired(tmp_path: Path) -> None:
    judge = JudgeSession("cpu", bind("cpu"))
    ours, theirs = socket.socketpair()
    with theirs, pytest.raises(ValueError, match="no kernel process is paired"):
        judge.handle(Pair(role=Role.JUDGE, beside=True), [ours.detach()])


def test_a_timing_beside_with_no_reference_paired_beside_is_refused(tmp_path: Path) -> None:
    the_job = job(tmp_path)
    judge = JudgeSession("cpu", bind("cpu"))
    with contextlib.chdir(tmp_path):
        expect(judge.load(Load(job=the_job, role=Role.JUDGE), []), Loaded)
        candidate, _ = partner(judge, the_job, beside=False)
        with pytest.raises(ValueError, match="no reference's process is paired beside"):
            judge.handle(TimeKernel(num_trials=4, reference_ms=1.0, beside=True), [])
        expect(judge.handle(Unpair(), []), Done)
        candidate.join(5)
