"""The judge's count of the reference's work: FLOPs per dtype and bytes, on one more call of the
reference that changes nothing the trials rely on, and never fails a job."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.nn.modules import module as nn_module
from torch.utils.flop_counter import FlopCounterMode

from compilation.base import Arguments
from harness.timer import Timer
from judge.flops import count_work, dtype_key
from judge.session import JudgeSession
from shared.models import WorkerJob
from shared.protocol import (
    CallDone,
    CallPurpose,
    ExtraFigures,
    Extras,
    KernelTimed,
    Load,
    Role,
    TimeKernel,
    TimingReport,
    WarmedUp,
)
from tests.unit.judge.cpu_judge import clocked, loaded_judge, vector_slots


class Exe:
    """A reference as the judge holds it: ``run`` calls ``fn`` on the arguments."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.calls = 0

    def run(self, args: Arguments) -> list[torch.Tensor]:
        self.calls += 1
        with torch.no_grad():
            out = self.fn(*args.values)
        return list(out) if isinstance(out, (list, tuple)) else [out]


def counted(fn: Callable[..., Any], values: list[Any], kernel_type: str = "torch",
            writes_args: bool = False) -> Any:
    exe = Exe(fn)
    args = Arguments(values)
    outputs = exe.run(args)
    return count_work(exe, args, outputs, writes_args=writes_args,  # type: ignore[arg-type]
                      kernel_type=kernel_type, device="cpu", sync=lambda: None)


def test_a_matmul_counts_two_flops_per_multiply_add_in_its_dtype() -> None:
    a, b = torch.randn(64, 128, dtype=torch.bfloat16), torch.randn(128, 32, dtype=torch.bfloat16)
    work = counted(torch.mm, [a, b])
    assert work.flops == 2 * 64 * 128 * 32
    assert work.flops_by_dtype == {"bf16": 2 * 64 * 128 * 32}
    assert (work.dtype, work.dtype_source, work.reason) == ("bf16", "counted", None)
    assert work.read_bytes == (64 * 128 + 128 * 32) * 2
    assert work.written_bytes == 64 * 32 * 2
    assert work.moved_bytes == work.read_bytes + work.written_bytes


def test_a_modules_parameters_and_buffers_are_read_bytes() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.BatchNorm1d(8)).eval()
    x = torch.randn(4, 16)
    work = counted(model, [x])
    state = sum(t.numel() * t.element_size()
                for t in (*model.parameters(), *model.buffers()))
    assert work.state_bytes == state
    assert work.read_bytes == x.numel() * 4 + state
    assert work.flops == 2 * 4 * 16 * 8


def test_a_tensor_passed_twice_is_read_once() -> None:
    x = torch.randn(1000)
    assert counted(torch.add, [x, x]).read_bytes == 4000


def test_elementwise_work_counts_zero_flops_and_takes_the_inputs_dtype() -> None:
    work = counted(torch.relu, [torch.randn(1024, dtype=torch.float16)])
    assert work.flops == 0 and work.flops_by_dtype == {}
    assert (work.dtype, work.dtype_source) == ("fp16", "inputs")


def test_flops_in_several_dtypes_are_split() -> None:
    def two(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a @ a).float() + (b @ b)

    work = counted(two, [torch.randn(32, 32, dtype=torch.bfloat16), torch.randn(32, 32)])
    assert work.flops_by_dtype == {"bf16": 2 * 32**3, "fp32": 2 * 32**3}
    assert work.flops == 4 * 32**3


def test_counting_changes_neither_the_outputs_nor_the_modules_state() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(8 * 16 * 16, 10), torch.nn.Softmax(dim=-1)).eval()
    x = torch.randn(2, 3, 16, 16)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    hooks = (dict(nn_module._global_forward_pre_hooks), dict(nn_module._global_forward_hooks))
    with torch.no_grad():
        plain = model(x)
        with FlopCounterMode(display=False):
            observed = model(x)
    assert torch.equal(plain, observed)  # bitwise: the mode only watches
    work = counted(model, [x])
    assert work.flops and work.flops > 0
    with torch.no_grad():
        assert torch.equal(model(x), plain)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    # the counter's module hooks and dispatch mode are gone once it is done
    assert (dict(nn_module._global_forward_pre_hooks),
            dict(nn_module._global_forward_hooks)) == hooks
    assert torch._C._len_torch_dispatch_stack() == 0
    assert torch.is_grad_enabled()


def test_a_reference_that_writes_its_arguments_is_counted_on_a_copy() -> None:
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    out = torch.full((8, 8), 7.0)

    def in_place(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        a.add_(1)
        return torch.mm(a, b, out=out)

    exe = Exe(in_place)
    args = Arguments([a, b, out])
    first = exe.run(args)
    a_after, out_after = a.clone(), out.clone()
    work = count_work(exe, args, first, writes_args=True,  # type: ignore[arg-type]
                      kernel_type="torch", device="cpu", sync=lambda: None)
    assert exe.calls == 2 and work.flops == 2 * 8**3
    assert torch.equal(a, a_after) and torch.equal(out, out_after)  # trial 0's, untouched


def test_a_count_that_fails_gives_the_reason_and_the_bytes() -> None:
    calls = []

    def second_call_fails(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("no second call")
        return x * 2

    work = counted(second_call_fails, [torch.randn(10)])
    assert work.flops is None and work.flops_by_dtype == {}
    assert work.reason is not None and "RuntimeError: no second call" in work.reason
    assert work.read_bytes == 40 and work.written_bytes == 40


def test_a_kernel_torch_cannot_see_into_has_unknown_flops() -> None:
    work = counted(torch.relu, [torch.randn(64)], kernel_type="triton")
    assert work.flops is None
    assert work.reason is not None and "triton kernel" in work.reason
    assert (work.dtype, work.read_bytes) == ("fp32", 256)
    # what torch does see of such a reference is counted
    mixed = counted(torch.mm, [torch.randn(4, 4), torch.randn(4, 4)], kernel_type="multi_kernel")
    assert mixed.flops == 2 * 4**3


def test_float32_matmuls_on_a_gpu_count_as_tf32_where_torch_lets_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    precision = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        assert dtype_key(torch.float32, "aten.mm", "cuda") == "tf32"
        assert dtype_key(torch.float32, "aten.mm", "cpu") == "fp32"
        torch.set_float32_matmul_precision("highest")
        assert dtype_key(torch.float32, "aten.mm", "cuda") == "fp32"
    finally:
        torch.set_float32_matmul_precision(precision)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    assert dtype_key(torch.float32, "aten.convolution", "cuda") == "tf32"
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    assert dtype_key(torch.float32, "aten.convolution", "cuda") == "fp32"
    assert dtype_key(torch.bfloat16, "aten.mm", "cuda") == "bf16"
    assert dtype_key(torch.float8_e4m3fn) == "fp8"


# ---- in the judge ------------------------------------------------------------------------------

BN_SOURCE = """
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(16)
        self.lin = torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.lin(self.bn(x))


def get_inputs():
    return [torch.randn(32, 16)]


def get_init_inputs():
    return []
"""


def judge_of(tmp_path: Path, source: str) -> JudgeSession:
    kernel = {"source_code": source, "kernel_type": "torch"}
    job = WorkerJob.model_validate({"job_id": "t", "kind": "compare", "device": "cpu",
                                    "cache_dir": str(tmp_path), "kernel": kernel,
                                    "ref_kernel": kernel})
    judge = JudgeSession("cpu", Timer())
    with contextlib.chdir(tmp_path):
        judge.load(Load(job=job, role=Role.JUDGE), [])
    return judge


def test_trial_zero_carries_the_references_work(tmp_path: Path) -> None:
    judge = loaded_judge(tmp_path, secret=1)  # x * 2 over 256 float32
    first = judge.first_trial()
    assert first.work is not None
    assert first.work.flops == 0 and first.work.dtype == "fp32"
    assert (first.work.read_bytes, first.work.written_bytes) == (1024, 1024)
    assert torch.equal(first.outputs[0], judge.trial0_values()[0] * 2)


def test_the_count_leaves_a_stateful_reference_as_it_was_loaded(tmp_path: Path) -> None:
    judge = judge_of(tmp_path, BN_SOURCE)
    module = judge.kernel().fn  # type: ignore[attr-defined]
    module.train()  # running statistics move with every call
    before = {k: v.clone() for k, v in module.state_dict().items()}
    first = judge.first_trial()
    assert first.work is not None and first.work.flops == 2 * 32 * 16 * 8
    assert all(torch.equal(v, before[k]) for k, v in module.state_dict().items())


class DoublingPartner:
    """The kernel's process, played in-process: doubles its input slot."""

    def __init__(self, slots: Any) -> None:
        self.slots = slots

    def call(self, purpose: CallPurpose, index: int) -> CallDone:
        self.slots.outputs[0].copy_(self.slots.inputs[0] * 2)
        return CallDone(index=index, outputs=[], copied=True)

    def warm_up(self, quick: bool = False, deadline: float | None = None,
                cores: list[int] | None = None, shares_cores: bool = False) -> WarmedUp:
        return WarmedUp(calls=3, ms=1.0)

    def extras(self, message: Extras, deadline: float | None = None) -> ExtraFigures:
        return ExtraFigures(report=TimingReport(method="fake", event_ms=[]))


def test_the_timing_reply_carries_the_work(tmp_path: Path) -> None:
    judge = loaded_judge(tmp_path, secret=1)
    slots = vector_slots(256)
    clocked(judge, DoublingPartner(slots), slots)
    reply = judge.handle(TimeKernel(num_trials=20), [])
    assert isinstance(reply, KernelTimed), reply
    assert reply.work is not None and reply.work == judge.first_trial().work
    assert KernelTimed.model_validate_json(reply.model_dump_json()).work == reply.work
