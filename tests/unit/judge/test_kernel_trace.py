"""Each timing run brings back the kernel's process's trace of one more call (its math modes;
its launches where it can see them), for the result's launch provenance: a candidate's and,
paired the same way, the reference's. On the CPU, a judge and its paired kernel's process
played in one process as the worker's rehearsal plays them; /evaluate's own timing too."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.timer import NO_GPU, Timer
from judge.session import JudgeSession
from kernel_side.session import KernelSession
from profiling.provenance import assemble
from shared.channel import Channel, ChannelClosed, ProtocolError
from shared.models import WorkerJob
from shared.protocol import (
    PAIR_REQUESTS,
    Calibrate,
    KernelTimed,
    Load,
    Pair,
    PrepareSamples,
    Role,
    SelfTimed,
    TimeKernel,
    TimeSelf,
    Trials,
    TrialsPassed,
    Unpair,
)

IO = {"args": [{"name": name, "type": "tensor", "role": "input",
                "tensor_spec": {"shape": [16, 16], "dtype": "float32",
                                "init": {"kind": "randn", "seed": seed}}}
               for name, seed in (("a", 1), ("b", 2))]}
REFERENCE = {"source_code": "class Model(torch.nn.Module):\n    def forward(self, a, b):\n"
                            "        return a @ b\n", "kernel_type": "torch", "io": IO}
# a candidate that computes its matmul with TF32 allowed, and puts the flag back after
TF32_INSIDE = {"source_code": (
    "class Model(torch.nn.Module):\n"
    "    def forward(self, a, b):\n"
    "        torch.backends.cuda.matmul.allow_tf32 = True\n"
    "        try:\n"
    "            return a @ b\n"
    "        finally:\n"
    "            torch.backends.cuda.matmul.allow_tf32 = False\n"), "kernel_type": "torch",
    "io": IO}


def job(tmp_path: Path, candidate: dict) -> WorkerJob:
    return WorkerJob.model_validate({"job_id": "trace", "kind": "compare", "device": "cpu",
                                     "cache_dir": str(tmp_path), "num_correct_trials": 1,
                                     "kernel": candidate, "ref_kernel": REFERENCE})


def serve(side: KernelSession, channel: Channel) -> None:
    """The kernel's process's end of the pair channel, until the judge unpairs."""
    while True:
        try:
            request, fds = channel.recv(PAIR_REQUESTS)
        except (ChannelClosed, ProtocolError, OSError):
            break
        if isinstance(request, Unpair):
            break
        channel.send(side.handle(request, fds))
    channel.close()
    side.unpair()


@contextlib.contextmanager
def paired(judge: JudgeSession, side: KernelSession) -> Iterator[None]:
    ours, theirs = socket.socketpair()
    assert judge.handle(Pair(role=Role.JUDGE, secret=7), [ours.detach()]).kind == "done"
    thread = threading.Thread(target=serve, args=(side, Channel(theirs)), daemon=True)
    thread.start()
    try:
        yield
    finally:
        judge.handle(Unpair(), [])
        thread.join(10)


def timed(judge: JudgeSession, the_job: WorkerJob) -> KernelTimed:
    """A timing run of ``the_job``'s kernel in a kernel's process of its own, paired with
    ``judge``."""
    side = KernelSession("cpu", Timer())
    with paired(judge, side):
        assert judge.handle(Calibrate(), []).kind == "calibrated"
        loaded = side.load(Load(job=the_job, role=Role.KERNEL), [])
        assert loaded.kind == "loaded", loaded
        assert isinstance(judge.handle(Trials(first=0, count=1), []), TrialsPassed)
        assert judge.handle(PrepareSamples(num_trials=3), []).kind == "done"
        reply = judge.handle(TimeKernel(num_trials=3), [])
    assert isinstance(reply, KernelTimed), reply
    return reply


@pytest.fixture
def judge(tmp_path: Path) -> Iterator[JudgeSession]:
    with contextlib.chdir(tmp_path):
        session = JudgeSession("cpu", Timer())
        assert session.load(Load(job=job(tmp_path, TF32_INSIDE), role=Role.JUDGE), []).kind \
            == "loaded"
        yield session


def test_both_sides_timings_bring_their_traces_and_the_looser_one_is_found(
        tmp_path: Path, judge: JudgeSession) -> None:
    the_job = job(tmp_path, TF32_INSIDE)
    with contextlib.chdir(tmp_path):
        # (the reference timed as the comparison times it: loaded as a kernel's process's own)
        as_kernel = the_job.model_copy(update={"kernel": the_job.ref_kernel})
        reference = timed(judge, as_kernel).timing.kernel_trace
        candidate = timed(judge, the_job).timing.kernel_trace
    assert reference is not None and candidate is not None
    for trace in (reference, candidate):
        assert trace.observed_by == "kernel_process" and trace.device == "cpu"
        assert trace.unobservable == NO_GPU and trace.input_dtypes == ["float32"]
        assert trace.call_error is None
    assert reference.modes_set == []
    assert candidate.modes_set == ["matmul_tf32=True", "matmul_tf32=False"]
    # (put back by the forward: the modes after the call are those before it)
    assert candidate.modes_after.matmul_tf32 is False
    assert the_job.ref_kernel is not None
    found = assemble(candidate, the_job.kernel, reference, the_job.ref_kernel)
    assert found.precision_parity is not None
    assert len(found.precision_parity.looser) == 1
    assert "TF32 for float32 matmuls" in found.precision_parity.looser[0]
    assert found.candidate is not None and not found.candidate.observed


def test_evaluates_own_timing_brings_its_trace(tmp_path: Path) -> None:
    alone = job(tmp_path, TF32_INSIDE).model_copy(update={"kind": "evaluate",
                                                          "ref_kernel": None})
    side = KernelSession("cpu", Timer())
    with contextlib.chdir(tmp_path):
        assert side.load(Load(job=alone, role=Role.KERNEL), []).kind == "loaded"
        reply = side.handle(TimeSelf(num_trials=3), [])
    assert isinstance(reply, SelfTimed), reply
    assert reply.trace is not None and reply.trace.unobservable == NO_GPU
    assert reply.trace.modes_set == ["matmul_tf32=True", "matmul_tf32=False"]
