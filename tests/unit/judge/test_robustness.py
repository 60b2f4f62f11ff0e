"""The judge's robustness cases: a real judge on the CPU with a real reference and real
(memfd) arenas, the kernel's process played in-process by a partner that maps the arenas it
is sent and computes on their slots."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

import torch

from harness.arena import Arena
from harness.tensors import meta
from harness.timer import Timer
from judge.partner import PartnerFailure, PartnerLost
from judge.session import JudgeSession
from shared.models import Outcome, WorkerJob
from shared.protocol import (
    Calibrate,
    Calibrated,
    CallDone,
    CallPurpose,
    Failure,
    Load,
    MapArena,
    Robustness,
    RobustnessChecked,
    Role,
)
from tests.unit.judge.cpu_judge import loaded_judge

KERNELBENCH = """
class Model(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x)

def get_inputs():
    return [torch.randn(64, 32)]

def get_init_inputs():
    return []
"""
SHAPES = """
def get_robustness_inputs():
    return [[torch.randn(3, 5)], [torch.randn(128, 7)]]
"""


class InProcessPartner:
    """The kernel's process: ``kernel`` called on the mapped arena's input values."""

    def __init__(self, kernel: Callable[..., torch.Tensor], maps: int = 100) -> None:
        self.kernel = kernel
        self.maps = maps  # arenas it can map; past them, it answers as out of memory
        self.arena: Arena | None = None
        self.calls: list[tuple[CallPurpose, int]] = []
        self.mapped: list[list[list[int]]] = []

    def map_arena(self, message: MapArena, fd: int) -> None:
        if len(self.mapped) == self.maps:
            raise PartnerFailure(Failure(outcome=Outcome.RUNTIME_ERROR, out_of_memory=True,
                                         message="out of memory mapping the arena"))
        if self.arena is not None:
            self.arena.close()
        self.arena = Arena.attach(message.layout, os.dup(fd), "cpu")
        self.mapped.append([s.shape for s in message.layout.inputs])

    def ask(self, purpose: CallPurpose, index: int, seq: int = 0) -> None:
        self.calls.append((purpose, index))

    def answer(self, index: int, within_s: float | None) -> CallDone | None:
        assert self.arena is not None
        try:
            out = self.kernel(*self.arena.values())
        except (ArithmeticError, RuntimeError) as exc:  # what the kernel's process answers
            raise PartnerFailure(Failure(outcome=Outcome.RUNTIME_ERROR,
                                         message=f"{type(exc).__name__}: {exc}")) from exc
        if out is None:
            return None  # a call that does not return in time
        self.arena.outputs[0].copy_(out)
        return CallDone(index=index, outputs=[meta(out)], copied=True)

    def close(self) -> None:
        pass


def kernelbench_judge(tmp_path: Path, source: str) -> JudgeSession:
    kernel = {"source_code": source, "kernel_type": "torch"}
    job = WorkerJob.model_validate({"job_id": "t", "kind": "compare", "device": "cpu",
                                    "cache_dir": str(tmp_path), "num_correct_trials": 1,
                                    "kernel": kernel, "ref_kernel": kernel})
    judge = JudgeSession("cpu", Timer())
    with contextlib.chdir(tmp_path):
        loaded = judge.load(Load(job=job, role=Role.JUDGE), [])
    assert not isinstance(loaded, Failure), loaded
    judge.comparison, judge.secret = job, 7
    return judge


def checked(judge: JudgeSession, partner: InProcessPartner, first: int = 6) -> RobustnessChecked:
    judge.partner = partner  # type: ignore[assignment]
    assert isinstance(judge.calibrate(Calibrate(kept=True), []), Calibrated)
    reply = judge.handle(Robustness(first=first), [])
    assert isinstance(reply, RobustnessChecked), reply
    return reply


def statuses(reply: RobustnessChecked) -> dict[str, str]:
    return {case.name: case.status for case in reply.report.cases}


def test_an_honest_iocontract_kernel_passes_every_case_called_as_a_trial(tmp_path: Path) -> None:
    partner = InProcessPartner(lambda x: x * 2)
    reply = checked(loaded_judge(tmp_path, 3), partner, first=6)
    assert statuses(reply) == {"scale_1e-3": "passed", "scale_1e3": "passed",
                               "uniform": "passed", "outliers": "passed", "zeros": "passed"}
    report = reply.report
    assert report.all_passed and report.passed == 5 and report.failed == report.skipped == 0
    # the kernel's process sees each case as a correctness trial, numbered after the recheck
    assert partner.calls == [(CallPurpose.TRIAL, i) for i in range(6, 11)]
    assert "IOContract problem" in report.other_shapes
    for case in report.cases:
        assert case.max_abs_error is not None and case.max_abs_error <= 1e-6 * 2e3, case


def test_a_kernel_right_only_near_its_trials_inputs_fails_the_cases_far_from_them(
        tmp_path: Path) -> None:
    clamped = InProcessPartner(lambda x: x.clamp(-5, 5) * 2)
    reply = checked(loaded_judge(tmp_path, 3), clamped)
    got = statuses(reply)
    assert got["scale_1e3"] == "failed" and got["outliers"] == "failed", got
    assert got["scale_1e-3"] == got["uniform"] == got["zeros"] == "passed", got
    failed = next(c for c in reply.report.cases if c.name == "scale_1e3")
    assert failed.reason is not None and "differ beyond" in failed.reason
    assert failed.max_abs_error is not None and failed.max_abs_error > 100
    assert failed.max_abs_at is not None and failed.max_abs_at[0] == 0
    assert not reply.report.all_passed and reply.report.failed == 2


def test_a_kernel_that_raises_fails_that_case_and_one_that_dies_ends_the_cases(
        tmp_path: Path) -> None:
    def raises_on_zeros(x: torch.Tensor) -> torch.Tensor:
        if not x.any():
            raise ZeroDivisionError("no")
        return x * 2

    reply = checked(loaded_judge(tmp_path, 3), InProcessPartner(raises_on_zeros))
    zeros = reply.report.cases[-1]
    assert zeros.status == "failed" and zeros.reason is not None
    assert "ZeroDivisionError" in zeros.reason

    def dies_when_large(x: torch.Tensor) -> torch.Tensor:
        if x.abs().max() > 100:
            raise PartnerLost("its channel closed")
        return x * 2

    reply = checked(loaded_judge(tmp_path, 3), InProcessPartner(dies_when_large))
    assert statuses(reply) == {"scale_1e-3": "passed", "scale_1e3": "failed",
                               "uniform": "skipped", "outliers": "skipped", "zeros": "skipped"}
    assert "went away" in (reply.report.cases[1].reason or "")


def test_a_call_that_does_not_return_fails_its_case_and_skips_the_rest(tmp_path: Path) -> None:
    reply = checked(loaded_judge(tmp_path, 3),
                    InProcessPartner(lambda x: None if x.abs().max() < 0.1 else x * 2))
    assert statuses(reply) == {"scale_1e-3": "failed", "scale_1e3": "skipped",
                               "uniform": "skipped", "outliers": "skipped", "zeros": "skipped"}
    assert "did not return" in (reply.report.cases[0].reason or "")


def test_a_kernelbench_problems_get_inputs_are_varied_and_its_declared_shapes_run(
        tmp_path: Path) -> None:
    partner = InProcessPartner(torch.tanh)
    reply = checked(kernelbench_judge(tmp_path, KERNELBENCH + SHAPES), partner)
    report = reply.report
    assert [c.name for c in report.cases] == ["scale_1e-3", "scale_1e3", "uniform", "outliers",
                                              "zeros", "shapes_1", "shapes_2"]
    assert report.all_passed and report.passed == 7, report
    assert report.other_shapes == "2 declared by get_robustness_inputs()"
    assert [c.shapes for c in report.cases[-2:]] == [[[3, 5]], [[128, 7]]]
    # each other size is handed over in an arena of its own layout
    assert partner.mapped == [[[64, 32]], [[3, 5]], [[128, 7]]]


def test_a_tanh_by_its_textbook_formula_fails_where_exp_overflows(tmp_path: Path) -> None:
    def textbook(x: torch.Tensor) -> torch.Tensor:  # right for |x| < 44, NaN beyond
        e = torch.exp(2 * x)
        return (e - 1) / (e + 1)

    reply = checked(kernelbench_judge(tmp_path, KERNELBENCH + SHAPES),
                    InProcessPartner(textbook))
    assert statuses(reply) == {"scale_1e-3": "passed", "scale_1e3": "failed",
                               "uniform": "passed", "outliers": "failed", "zeros": "passed",
                               "shapes_1": "passed", "shapes_2": "passed"}
    large = reply.report.cases[1]
    assert large.reason is not None and "nan" in large.reason.lower(), large.reason


def test_a_kernel_written_for_one_size_fails_the_declared_others(tmp_path: Path) -> None:
    reply = checked(kernelbench_judge(tmp_path, KERNELBENCH + SHAPES),
                    InProcessPartner(lambda x: torch.tanh(x.view(64, 32))))
    got = statuses(reply)
    assert got.pop("shapes_1") == got.pop("shapes_2") == "failed"
    assert set(got.values()) == {"passed"}
    assert "the kernel failed on these inputs: RuntimeError" in (
        reply.report.cases[-1].reason or "")


def test_a_size_the_kernels_process_cannot_map_is_skipped(tmp_path: Path) -> None:
    partner = InProcessPartner(torch.tanh, maps=2)  # the pairing's arena and one more
    reply = checked(kernelbench_judge(tmp_path, KERNELBENCH + SHAPES), partner)
    shapes_1, shapes_2 = reply.report.cases[-2:]
    assert shapes_1.status == "passed"
    assert shapes_2.status == "skipped" and "could not map" in (shapes_2.reason or "")
    assert reply.report.all_passed


def test_without_declared_shapes_the_report_says_how_to_declare_them(tmp_path: Path) -> None:
    reply = checked(kernelbench_judge(tmp_path, KERNELBENCH), InProcessPartner(torch.tanh))
    assert len(reply.report.cases) == 5 and reply.report.all_passed
    assert "get_robustness_inputs()" in reply.report.other_shapes


def test_a_case_the_op_cannot_take_is_skipped_with_the_reason(tmp_path: Path) -> None:
    source = KERNELBENCH.replace("torch.tanh(x)", "x / x.norm()")
    reply = checked(kernelbench_judge(tmp_path, source),
                    InProcessPartner(lambda x: x / x.norm()))
    zeros = reply.report.cases[-1]
    assert zeros.status == "skipped" and "not finite" in (zeros.reason or ""), zeros
    assert reply.report.all_passed and reply.report.skipped == 1


def test_the_references_module_state_is_as_the_recheck_left_it(tmp_path: Path) -> None:
    source = KERNELBENCH.replace(
        "class Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.tanh(x)",
        "class Model(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.bn = torch.nn.BatchNorm1d(32)\n    def forward(self, x):\n"
        "        return self.bn(x)")
    judge = kernelbench_judge(tmp_path, source)
    buffers = judge.module_buffers()
    assert buffers
    before = {k: v.clone() for k, v in buffers.items()}
    reply = checked(judge, InProcessPartner(lambda x: torch.zeros_like(x)))
    assert reply.report.cases  # it ran (and the kernel is wrong: no matter here)
    assert all(torch.equal(buffers[k], v) for k, v in before.items())
