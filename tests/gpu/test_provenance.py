"""Launch provenance and precision parity on a CUDA GPU, from the kernel's processes' own traces.

A comparison's two job processes are started as the zygote starts them
(``subprocess_worker.serve``) and driven as the comparison flow drives them (pair, calibrate,
load, trials, timing), with this test in the server's place: the judge times the reference in a
kernel's process of its own, then the candidate in another, and each timing brings back that
process's trace of one more call (``JudgedTiming.kernel_trace``). From those,
:func:`profiling.provenance.assemble` makes the result's blocks:

- a ``torch_cuda`` answer whose extension only calls ``torch::matmul`` (cuBLAS's kernels) is
  flagged: it ran no kernel of its own;
- a ``torch`` answer that defines a Triton kernel and never launches it (ATen's add ran) is
  flagged;
- honest Triton, CUDA and ``load_inline`` kernels are their own, with most of the device time,
  and so are the kernels each kernel language's example compiles;
- a candidate that switches TF32 on inside its forward is looser than its float32 reference,
  and TF32 kernels say so in their names.

/evaluate's own timing (the kernel's process alone) is taken in this process. The last test
reads the blocks from the result itself, once the server places them there.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from compilation.languages import device_capability
from profiling import integrity
from profiling.kernel_origins import Origin, computes_in_tf32
from profiling.provenance import ProvenanceFindings, assemble
from shared.channel import Channel
from shared.languages import LANGUAGES, first_unavailable
from shared.models import KernelCode, WorkerJob
from shared.protocol import (
    REHEARSE_ALONE,
    REHEARSE_ENV,
    REPLIES,
    Calibrate,
    Calibrated,
    CallTrace,
    Done,
    Exit,
    KernelTimed,
    Load,
    Loaded,
    Message,
    Pair,
    PrepareSamples,
    Ready,
    Role,
    TimeKernel,
    Trials,
    TrialsPassed,
    Unpair,
)
from tests.conftest import ROOT
from tests.e2e.test_mixed_compare import CUDA, CUDA_IO, REFERENCE, TORCH_CUDA, TRITON, TRITON_IO
from tests.gpu.test_kernel_languages import EXAMPLES as DSL_EXAMPLES
from tests.gpu.test_kernel_languages import IO as DSL_IO
from tests.gpu.test_kernel_languages import REF as DSL_REF

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(1200)]

R = TypeVar("R", bound=Message)
# (candidate, reference, more fields of the job) -> the blocks
Compare = Callable[..., ProvenanceFindings]
REPLY_TIMEOUT_S = 600.0  # a first load_inline build takes about a minute of nvcc
SAMPLES = 20
TRACE_OVERHEAD_MS = 50.0
N = 1024


def tensor(name: str, shape: list[int], seed: int) -> dict:
    return {"name": name, "type": "tensor", "role": "input",
            "tensor_spec": {"shape": shape, "dtype": "float32",
                            "init": {"kind": "randn", "seed": seed}}}


MATMUL_IO = {"args": [tensor("a", [N, N], 1), tensor("b", [N, N], 2)]}
MATMUL = {"source_code": "class Model(torch.nn.Module):\n    def forward(self, a, b):\n"
                         "        return a @ b\n", "kernel_type": "torch", "io": MATMUL_IO}
# (a torch_cuda answer takes its reference's inputs, as KernelBench's ModelNew does)
CUBLAS_ONLY = {"kernel_type": "torch_cuda", "source_code": '''
import torch
from torch.utils.cpp_extension import load_inline

cpp_source = """
#include <torch/extension.h>
torch::Tensor mm(torch::Tensor a, torch::Tensor b) { return torch::matmul(a, b); }
"""
ext = load_inline(name="provenance_cublas_only", cpp_sources=cpp_source, functions=["mm"])


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return ext.mm(a, b)
'''}
TRITON_NEVER_LAUNCHED = {"kernel_type": "torch", "io": REFERENCE["io"], "source_code": '''
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)


class ModelNew(torch.nn.Module):
    def forward(self, x, y):
        return x + y  # (add_kernel is never launched)
'''}
HONEST_TRITON = {"source_code": TRITON.replace("OP", "+"), "kernel_type": "triton",
                 "io": TRITON_IO}
HONEST_CUDA = {"source_code": CUDA.replace("OP", "+"), "kernel_type": "cuda", "io": CUDA_IO,
               "metadata": {"kernel_name": "add"}}
HONEST_TORCH_CUDA = {"source_code": TORCH_CUDA.replace("OP", "+"), "kernel_type": "torch_cuda"}
TF32_INSIDE = {"kernel_type": "torch", "io": MATMUL_IO, "source_code": (
    "class Model(torch.nn.Module):\n"
    "    def forward(self, a, b):\n"
    "        torch.backends.cuda.matmul.allow_tf32 = True\n"
    "        try:\n"
    "            return a @ b\n"
    "        finally:\n"
    "            torch.backends.cuda.matmul.allow_tf32 = False\n")}
# a tolerance that lets TF32 on this 1024-deep float32 matmul pass its trials (1e-3 fails it)
LOOSE = {"atol": 0.1, "rtol": 0.1}
TF32_AT_IMPORT = {"kernel_type": "torch", "io": MATMUL_IO, "source_code": (
    "torch.backends.cuda.matmul.allow_tf32 = True\n\n"
    "class Model(torch.nn.Module):\n"
    "    def forward(self, a, b):\n"
    "        return a @ b\n")}

# A job process as the zygote starts one, on a socket handed down as descriptor argv[1].
CHILD = (
    "import os, sys, time\n"
    "from shared.channel import Channel\n"
    "from shared.protocol import Spawn\n"
    "import subprocess_worker\n"
    "spawn = Spawn(scratch=os.getcwd(), hidden=[], writable=[], readable=[], uid=os.getuid(),\n"
    "              network=False, env={}, scratch_mb=0, requested_at=time.monotonic())\n"
    "sys.exit(subprocess_worker.serve(Channel.from_fd(int(sys.argv[1])), spawn))\n"
)


class JobProcess:
    """One job process (``subprocess_worker.serve``), driven as the server drives it."""

    def __init__(self, workdir: Path, name: str, device: str = "cuda") -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.log = workdir / f"{name}.log"
        ours, theirs = socket.socketpair()
        ours.settimeout(REPLY_TIMEOUT_S)
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "PYTHONPATH": path, "KES_DEVICE": device,
               REHEARSE_ENV: REHEARSE_ALONE, "CUDA_DEVICE_MAX_CONNECTIONS": "1",
               "PYTHONUNBUFFERED": "1"}
        if device == "cpu":
            env["TRITON_INTERPRET"] = "1"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", CHILD, str(theirs.fileno())], pass_fds=[theirs.fileno()],
                cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT)
        theirs.close()
        self.channel = Channel(ours)
        ready, _ = self.channel.recv(REPLIES)
        assert isinstance(ready, Ready), f"{ready!r}\n{self.tail()}"

    def ask(self, message: Message, expected: type[R], fds: tuple[int, ...] = ()) -> R:
        self.channel.send(message, fds)
        reply, extra = self.channel.recv(REPLIES)
        for fd in extra:
            os.close(fd)
        assert isinstance(reply, expected), \
            f"{type(message).__name__} was answered {reply!r}\n{self.tail()}"
        return reply

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def close(self) -> None:
        with suppress(OSError):
            self.channel.send(Exit())
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.channel.close()


class Comparison:
    """A judge's process with the reference loaded, and kernel's processes paired with it in
    turn, each timed as the comparison flow times the reference and the candidate."""

    def __init__(self, workdir: Path, job: WorkerJob) -> None:
        self.workdir, self.job = workdir, job
        self.judge = JobProcess(workdir / "judge", "judge", job.device)
        self.judge.ask(Load(job=job, role=Role.JUDGE), Loaded)
        self.pairings = 0

    def timed(self, kernel: KernelCode, trials: bool) -> KernelTimed:
        """``kernel`` loaded in a fresh kernel's process, paired, (checked,) timed."""
        self.pairings += 1
        side = JobProcess(self.workdir / f"kernel{self.pairings}", f"kernel{self.pairings}",
                          self.job.device)
        try:
            ours, theirs = socket.socketpair()
            with ours, theirs:
                self.judge.ask(Pair(role=Role.JUDGE, secret=secrets.randbits(62), job=self.job,
                                    pairing=self.pairings), Done, (ours.fileno(),))
                side.ask(Pair(role=Role.KERNEL), Done, (theirs.fileno(),))
            self.judge.ask(Calibrate(), Calibrated)
            side.ask(Load(job=self.job.model_copy(update={"kernel": kernel}), role=Role.KERNEL),
                     Loaded)
            if trials:
                self.judge.ask(Trials(first=0, count=2), TrialsPassed)
            self.judge.ask(PrepareSamples(num_trials=SAMPLES), Done)
            timed = self.judge.ask(TimeKernel(num_trials=SAMPLES), KernelTimed)
            self.judge.ask(Unpair(), Done)
        finally:
            side.close()
        return timed

    def findings(self) -> ProvenanceFindings:
        """The reference timed, then the candidate; their blocks, as a result carries them."""
        assert self.job.ref_kernel is not None
        reference = self.timed(self.job.ref_kernel, trials=False)
        candidate = self.timed(self.job.kernel, trials=True)
        ref_trace, cand_trace = reference.timing.kernel_trace, candidate.timing.kernel_trace
        assert ref_trace is not None and cand_trace is not None
        for trace in (ref_trace, cand_trace):
            assert_observed(trace)
        return assemble(cand_trace, self.job.kernel, ref_trace, self.job.ref_kernel,
                        candidate_ms=median(candidate), reference_ms=median(reference))

    def close(self) -> None:
        self.judge.close()


def median(timed: KernelTimed) -> float:
    return integrity.judge(timed.timing, SAMPLES, "cuda").stats.median


def assert_observed(trace: CallTrace) -> None:
    assert trace.observed_by == "kernel_process" and trace.device == "cuda"
    assert trace.unobservable is None, trace.unobservable
    assert trace.call_error is None, trace.call_error
    kernels = [k for k in trace.launches if k.kind == "kernel"]
    assert kernels, trace
    for k in kernels:
        assert k.grid is not None and k.block is not None and k.stream is not None, k
        assert k.device_ms > 0 and k.count >= 1, k
    assert trace.device_busy_ms is not None and trace.device_busy_ms > 0
    assert trace.input_dtypes == ["float32"]
    # what the trace cost beyond its call (CUPTI switched on and off, its buffers flushed)
    assert trace.wall_ms is not None and trace.cost_ms - trace.wall_ms < TRACE_OVERHEAD_MS, trace


@pytest.fixture
def compare(tmp_path: Path) -> Iterator[Compare]:
    opened: list[Comparison] = []

    def start(candidate: dict, reference: dict, **fields: Any) -> ProvenanceFindings:
        job = WorkerJob.model_validate({
            "job_id": f"provenance-{len(opened)}", "kind": "compare", "device": "cuda",
            "cache_dir": str(tmp_path / "cache"), "num_correct_trials": 2,
            "kernel": candidate, "ref_kernel": reference, **fields})
        comparison = Comparison(tmp_path / f"job{len(opened)}", job)
        opened.append(comparison)
        return comparison.findings()

    yield start
    for comparison in opened:
        comparison.close()


def names(found: ProvenanceFindings) -> str:
    """Every kernel of both sides with its origin, for a failure's message."""
    lines = []
    for block in (found.candidate, found.reference):
        if block is not None:
            lines += [f"{block.side}: {k.origin.value:9s} {k.source:30s} {k.demangled or k.name}"
                      for k in block.kernels]
    return "\n".join(lines)


def test_a_torch_cuda_answer_that_only_calls_cublas_is_flagged(compare: Compare) -> None:
    found = compare(CUBLAS_ONLY, MATMUL)
    block, ref = found.candidate, found.reference
    assert block is not None and ref is not None
    assert {k.origin for k in block.kernels} == {Origin.LIBRARY}, names(found)
    assert any(k.source == "cuBLAS" for k in block.kernels), names(found)
    assert block.no_own_kernel_ran and block.own_share == 0.0
    assert block.reason is not None and "torch_cuda" in block.reason
    assert found.integrity_reasons[0] == f"the candidate {block.reason}"
    # the reference ran cuBLAS too, and promised nothing
    assert {k.origin for k in ref.kernels} == {Origin.LIBRARY}, names(found)
    assert not ref.no_own_kernel_ran and ref.promises_own_code is None
    assert found.precision_parity is not None and found.precision_parity.looser == []


def test_a_triton_kernel_defined_and_never_launched_is_flagged(compare: Compare) -> None:
    found = compare(TRITON_NEVER_LAUNCHED, REFERENCE)
    block = found.candidate
    assert block is not None
    assert block.own_kernels_defined == ["add_kernel"]
    assert {k.origin for k in block.kernels} == {Origin.FRAMEWORK}, names(found)
    assert block.no_own_kernel_ran
    assert block.reason is not None and "add_kernel" in block.reason and "ATen" in block.reason


@pytest.mark.parametrize(("kernel", "own"), [
    (HONEST_TRITON, "add_kernel"),
    (HONEST_CUDA, "add"),
    (HONEST_TORCH_CUDA, "add_kernel"),  # (a C++ kernel: its name comes mangled)
], ids=["triton", "cuda", "torch_cuda"])
def test_an_honest_kernel_is_its_own_and_takes_the_device_time(compare: Compare, kernel: dict,
                                                               own: str) -> None:
    found = compare(kernel, REFERENCE)
    block = found.candidate
    assert block is not None and not block.no_own_kernel_ran and block.reason is None
    mine = [k for k in block.kernels if k.origin == Origin.OWN]
    assert mine and all(f"the source's {own}" == k.source for k in mine), names(found)
    assert block.own_share is not None and block.own_share >= 0.5, block
    assert found.integrity_reasons == []
    # the judge's figure beside the traced device time (no L2 flush there: not above it much)
    assert block.judged_ms is not None and block.busy_ms is not None
    assert block.busy_ms <= 3 * block.judged_ms + 0.01, block


def test_tf32_switched_on_inside_the_forward_is_looser_than_a_float32_reference(
        compare: Compare) -> None:
    found = compare(TF32_INSIDE, MATMUL, **LOOSE)
    got = found.precision_parity
    assert got is not None and found.candidate is not None
    assert "matmul_tf32=True" in found.candidate.math_modes.set_during_call
    assert found.candidate.math_modes.after.matmul_tf32 is False  # (put back by the forward)
    assert got.candidate.matmul_tf32 is True and got.reference.matmul_tf32 is False
    assert any("TF32 for float32 matmuls" in x for x in got.looser), got.looser
    assert any(r.startswith("the candidate ran with looser math modes") for r in
               found.integrity_reasons)


def test_tf32_kernels_say_so_in_their_names(compare: Compare) -> None:
    """What the names add where the modes before and after a call are all that is seen: the
    GEMM cuBLAS picks with TF32 allowed names its TF32 inputs ("tf32" in the name)."""
    found = compare(TF32_AT_IMPORT, MATMUL, **LOOSE)
    assert found.candidate is not None and found.reference is not None
    assert found.candidate.math_modes.before.matmul_tf32 is True
    assert found.candidate.math_modes.tf32_kernels, names(found)
    assert found.reference.math_modes.tf32_kernels == [], names(found)
    got = found.precision_parity
    assert got is not None and any("names say they compute in TF32" in x for x in got.looser)


@pytest.mark.parametrize("name", sorted(DSL_EXAMPLES))
def test_a_kernel_languages_kernels_are_the_sources_own(compare: Compare, name: str) -> None:
    """Each language's example (client/examples/dsl_kernels/) against ``a + b``: the kernels
    its DSL compiles are named by the rules of profiling.kernel_origins."""
    language = next(lang for lang in LANGUAGES if lang.name == name)
    missing = first_unavailable([language], "cuda", device_capability("cuda"))
    if missing is not None:
        pytest.skip(missing)
    candidate = {"source_code": DSL_EXAMPLES[name].CORRECT, "kernel_type": "torch", "io": DSL_IO}
    found = compare(candidate, {"source_code": DSL_REF, "kernel_type": "torch", "io": DSL_IO})
    block = found.candidate
    assert block is not None and block.promises_own_code is not None
    assert not block.no_own_kernel_ran, names(found)
    assert any(k.origin == Origin.OWN for k in block.kernels), names(found)


def test_evaluates_own_timing_traces_its_call(tmp_path: Path) -> None:
    """/evaluate's path: the kernel's process times itself and traces one more call."""
    import contextlib

    from harness.timer import bind
    from kernel_side.session import KernelSession
    from shared.protocol import SelfTimed, TimeSelf

    job = WorkerJob.model_validate({"job_id": "provenance-alone", "kind": "evaluate",
                                    "device": "cuda", "cache_dir": str(tmp_path / "cache"),
                                    "kernel": HONEST_TRITON})
    side = KernelSession("cuda", bind("cuda"))
    with contextlib.chdir(tmp_path):
        assert isinstance(side.load(Load(job=job, role=Role.KERNEL), []), Loaded)
        reply = side.handle(TimeSelf(num_trials=SAMPLES), [])
    assert isinstance(reply, SelfTimed), reply
    assert reply.trace is not None
    assert_observed(reply.trace)
    block = assemble(reply.trace, job.kernel).candidate
    assert block is not None and block.observed and not block.no_own_kernel_ran
    assert any(k.origin == Origin.OWN and k.name == "add_kernel" for k in block.kernels)
    assert computes_in_tf32(block.kernels[0].name) is False


@pytest.mark.e2e
def test_the_result_carries_both_blocks_and_the_flags(client: httpx.Client) -> None:
    body = client.post("/compare", json={"ref_kernel": MATMUL, "custom_kernel": CUBLAS_ONLY,
                                         "num_trials": SAMPLES, "timeout": 600}).json()
    custom, ref = body["kernel_exec_result"], body["ref_exec_result"]
    assert custom["correctness"] is True, body
    block = custom["metadata"]["provenance"]
    assert block["observed_by"] == "kernel_process" and block["no_own_kernel_ran"] is True
    assert {k["origin"] for k in block["kernels"]} == {"library"}
    assert "ran no kernel" in block["reason"]
    assert ref["metadata"]["provenance"]["promises_own_code"] is None
    # a library call is said in the block, not flagged: the answer may be honest
    assert not custom["integrity"]["suspicious"], custom["integrity"]
    assert custom["metadata"]["precision_parity"]["looser"] == []
    light = custom["metadata"]["speed_of_light"]
    assert light["flops_source"] == "counted" and light["flops"] == 2 * N ** 3
    assert 0 < light["compute_fraction"] <= 1.2 and light["score"] is not None


@pytest.mark.e2e
def test_tf32_inside_a_forward_is_flagged_where_a_loose_tolerance_lets_it_pass(
        client: httpx.Client) -> None:
    # (1e-2 fails TF32 on this 1024-deep fp32 matmul; 0.1 lets it through)
    body = client.post("/compare", json={"ref_kernel": MATMUL, "custom_kernel": TF32_INSIDE,
                                         "atol": 0.1, "rtol": 0.1, "num_trials": SAMPLES,
                                         "timeout": 600}).json()
    custom = body["kernel_exec_result"]
    assert custom["correctness"] is True, body
    assert custom["metadata"]["precision_parity"]["looser"], custom["metadata"]
    assert custom["integrity"]["suspicious"] is True
    assert any("looser math modes" in r for r in custom["integrity"]["reasons"])
