"""The job pipeline through the real executor (CPU mode): real zygote, real sandboxed workers,
no HTTP. How arguments reach kernels and what a comparison checks."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from io_contract import IOContractBuilder, create_randn_spec
from orchestration.executor import LocalExecutor
from shared.models import KernelCode, KernelType, Outcome, WorkerJob, WorkerResult
from tests.unit.conftest import cpu_executor


@pytest.fixture(scope="module")
def executor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[asyncio.AbstractEventLoop, LocalExecutor]]:
    with cpu_executor(tmp_path_factory.mktemp("executor")) as running:
        yield running


@pytest.fixture
def run(executor, tmp_path: Path):
    loop, ex = executor

    async def no_progress(message: str, fraction: float) -> None:
        pass

    def run_job(kind: str, kernel: KernelCode, ref: KernelCode | None = None, **kw) -> WorkerResult:
        job = WorkerJob(
            job_id="t", kind=kind, kernel=kernel, ref_kernel=ref, num_trials=3, num_correct_trials=3,
            device="cpu", work_dir=str(tmp_path / "job"), cache_dir=str(tmp_path / "cache"), **kw,
        )
        return loop.run_until_complete(ex.run(job, 120, no_progress))

    return run_job


def shared_io(seed_x: int = 1, seed_y: int = 2):
    return (
        IOContractBuilder()
        .add_input_tensor("x", create_randn_spec([256], seed=seed_x))
        .add_input_tensor("y", create_randn_spec([256], seed=seed_y))
        .add_output_tensor("out", [256])
        .add_scalar("n", "int", 256)
        .add_meta_param("BLOCK", 64)
        .build()
    )


def test_torch_reference_takes_only_the_args_it_names(run) -> None:
    # One contract for a kernel that writes `out` and a reference that returns its result.
    ref = KernelCode(
        source_code="class Model(torch.nn.Module):\n    def forward(self, x, y):\n        return x + y\n",
        kernel_type="torch", io=shared_io(),
    )
    custom = KernelCode(
        source_code="def add(x, y, out, n):\n    out[:n] = x + y\n",
        kernel_type="torch", io=shared_io(), metadata={"function_name": "add"},
    )
    result = run("compare", custom, ref)
    assert result.kernel_exec_result.correctness is True, result


def test_custom_kernel_gets_the_reference_inputs_even_with_other_seeds(run) -> None:
    ref = KernelCode(
        source_code="class Model(torch.nn.Module):\n    def forward(self, x, y):\n        return x * y\n",
        kernel_type="torch", io=shared_io(1, 2),
    )
    custom = KernelCode(
        source_code="def mul(x, y, out):\n    torch.mul(x, y, out=out)\n",
        kernel_type="torch", io=shared_io(7, 8), metadata={"function_name": "mul"},
    )
    assert run("compare", custom, ref).kernel_exec_result.correctness is True


def test_unwritten_output_fails(run) -> None:
    ref = KernelCode(
        source_code="class Model(torch.nn.Module):\n    def forward(self, x, y):\n        return x + y\n",
        kernel_type="torch", io=shared_io(),
    )
    lazy = KernelCode(
        source_code="def add(x, y, out):\n    out[:128] = (x + y)[:128]\n",
        kernel_type="torch", io=shared_io(), metadata={"function_name": "add"},
    )
    result = run("compare", lazy, ref).kernel_exec_result
    assert result.outcome == Outcome.INCORRECT
    assert "128 of 256 elements" in result.validation_error and "got nan" in result.validation_error


def test_input_count_mismatch_is_named(run) -> None:
    ref = KernelCode(
        source_code="class Model(torch.nn.Module):\n    def forward(self, x, y):\n        return x + y\n",
        kernel_type="torch", io=shared_io(),
    )
    io = IOContractBuilder().add_input_tensor("x", create_randn_spec([256])).add_output_tensor("out", [256]).build()
    custom = KernelCode(source_code="def f(x, out):\n    out.copy_(x)\n", kernel_type="torch", io=io,
                        metadata={"function_name": "f"})
    result = run("compare", custom, ref).kernel_exec_result
    assert result.outcome == Outcome.COMPILE_ERROR
    assert "1 input tensor(s) (x) but the reference takes 2" in result.compilation_error


def test_missing_parameter_is_named(run) -> None:
    kernel = KernelCode(
        source_code="def f(x, z):\n    return x\n", kernel_type="torch", io=shared_io(),
        metadata={"function_name": "f"},
    )
    result = run("evaluate", kernel).kernel_exec_result
    assert result.outcome == Outcome.COMPILE_ERROR
    assert "needs parameter(s) z" in result.compilation_error


def test_auto_generated_inputs_when_nothing_says_otherwise(run) -> None:
    kernel = KernelCode(
        source_code="class Model(torch.nn.Module):\n    def forward(self, a, b):\n        return a - b\n",
        kernel_type="torch",
    )
    result = run("evaluate", kernel).kernel_exec_result
    assert result.compiled and result.metadata["outputs"] == ["float32[1024]"]


def test_validate_does_not_time(run) -> None:
    kernel = KernelCode(source_code="class Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n",
                        kernel_type="torch", io=shared_io())
    result = run("validate", kernel).kernel_exec_result
    assert result.outcome == Outcome.SUCCESS and result.runtime_stats is None


def test_missing_backend_is_a_clear_error(monkeypatch) -> None:
    from compilation import registry
    from compilation.base import CompileError

    monkeypatch.setattr(registry, "BACKENDS", {})
    with pytest.raises(CompileError, match="kernel_type 'triton' has no backend"):
        registry.get_backend(KernelType.TRITON)


def test_kernel_imports_a_standard_module_the_zygote_never_loaded(run) -> None:
    # Workers import lazily, inside the sandbox, possibly as another uid: the interpreter's
    # own library must stay importable wherever it is installed (e.g. pyenv under /root).
    source = ("import tabnanny, wave\n"
              "class Model(torch.nn.Module):\n"
              "    def forward(self, x):\n"
              "        return x * 2 if tabnanny.__name__ and wave.__name__ else x\n")
    kernel = KernelCode(source_code=source, kernel_type="torch")
    result = run("validate", kernel).kernel_exec_result
    assert result.outcome == Outcome.SUCCESS, result
