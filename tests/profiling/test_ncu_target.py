"""The process ncu profiles, on the CPU: which kernel it builds, on which inputs, and that it
makes exactly one call inside the NVTX range after its warm-up."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from io_contract import IOContractBuilder, create_randn_spec
from kernel_side import ncu_target
from kernel_side.ncu_target import (
    ERROR_PREFIX,
    NVTX_RANGE,
    WARMUP_CALLS,
    prepare_call,
    run_profiled,
)
from shared.models import KernelCode, WorkerJob

ROOT = Path(__file__).resolve().parents[2]


def contract(seed_x: int, seed_y: int):
    return (
        IOContractBuilder()
        .add_input_tensor("x", create_randn_spec([128], seed=seed_x))
        .add_input_tensor("y", create_randn_spec([128], seed=seed_y))
        .build()
    )


REF = KernelCode(
    source_code="class Model(torch.nn.Module):\n    def forward(self, x, y):\n        return x + y\n",
    kernel_type="torch", io=contract(1, 2),
)
CUSTOM = KernelCode(  # its own contract has other seeds: a comparison must still use the ref's data
    source_code="def add(x, y):\n    return torch.add(x, y)\n",
    kernel_type="torch", io=contract(7, 8), metadata={"function_name": "add"},
)


def job(tmp_path: Path, kind: str = "compare", kernel: KernelCode = CUSTOM) -> WorkerJob:
    return WorkerJob(
        job_id="t", kind=kind, kernel=kernel, ref_kernel=REF if kind == "compare" else None,
        device="cpu", work_dir=str(tmp_path / "work"), cache_dir=str(tmp_path / "cache"),
    )


def test_one_call_inside_the_range_after_the_warm_up(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[object] = []

    @contextlib.contextmanager
    def recording_range(name: str, device: str) -> Iterator[None]:
        events.append(("push", name))
        yield
        events.append(("pop", name))

    monkeypatch.setattr(ncu_target, "nvtx_range", recording_range)
    run_profiled(lambda: events.append("call"), "cpu")
    assert events == ["call"] * WARMUP_CALLS + [("push", NVTX_RANGE), "call", ("pop", NVTX_RANGE)]


def test_custom_kernel_runs_on_the_references_inputs(tmp_path: Path) -> None:
    the_job = job(tmp_path)
    ref_inputs = prepare_call(the_job, "ref")
    custom = prepare_call(the_job, "custom")
    expected = ref_inputs()
    assert torch.equal(custom(), expected)


def test_kernel_of_an_evaluation_uses_its_own_inputs(tmp_path: Path) -> None:
    out = prepare_call(job(tmp_path, "evaluate"), "kernel")()  # its contract: seeds 7 and 8
    assert out.shape == (128,)
    ref_out = prepare_call(job(tmp_path / "c"), "ref")()
    assert not torch.equal(out, ref_out)


def test_ref_role_needs_a_reference(tmp_path: Path) -> None:
    with pytest.raises(ncu_target.TargetError, match="no reference"):
        prepare_call(job(tmp_path, "evaluate"), "ref")


def run_target(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernel_side.ncu_target", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def test_process_exits_0_after_the_call(tmp_path: Path) -> None:
    request = tmp_path / "job.json"
    request.write_text(job(tmp_path).model_dump_json())
    done = run_target(str(request), "custom")
    assert done.returncode == 0, done.stderr
    assert f"the custom kernel ran once inside NVTX range '{NVTX_RANGE}'" in done.stderr


def test_process_reports_a_failing_kernel_on_stderr(tmp_path: Path) -> None:
    failing = KernelCode(source_code="def add(x, y):\n    raise RuntimeError('boom')\n",
                         kernel_type="torch", io=contract(1, 2), metadata={"function_name": "add"})
    request = tmp_path / "job.json"
    request.write_text(job(tmp_path, "evaluate", failing).model_dump_json())
    done = run_target(str(request), "kernel")
    assert done.returncode == ncu_target.EXIT_KERNEL_FAILED
    assert f"{ERROR_PREFIX}the kernel failed while running:" in done.stderr
    assert "RuntimeError: boom" in done.stderr


@pytest.mark.parametrize("args", [(), ("job.json",), ("job.json", "both")])
def test_process_usage(args: tuple[str, ...]) -> None:
    done = run_target(*args)
    assert done.returncode == ncu_target.EXIT_USAGE and ERROR_PREFIX in done.stderr


def test_unreadable_job_file(tmp_path: Path) -> None:
    done = run_target(str(tmp_path / "missing.json"), "kernel")
    assert done.returncode == ncu_target.EXIT_USAGE and "cannot read the job file" in done.stderr
