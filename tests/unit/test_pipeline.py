"""The worker's pipeline, in-process: how arguments reach kernels and what a comparison checks."""

from __future__ import annotations

from pathlib import Path

from io_contract import IOContractBuilder, create_randn_spec
from shared.models import KernelCode, Outcome, WorkerJob
from subprocess_worker import Pipeline


def run(tmp_path: Path, kind: str, kernel: KernelCode, ref: KernelCode | None = None, **kw) -> object:
    job = WorkerJob(
        job_id="t", kind=kind, kernel=kernel, ref_kernel=ref, num_trials=3, num_correct_trials=3,
        device="cpu", work_dir=str(tmp_path / "work"), cache_dir=str(tmp_path / "cache"), **kw,
    )
    return Pipeline(job).run()


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


def test_torch_reference_takes_only_the_args_it_names(tmp_path: Path) -> None:
    # One contract for a kernel that writes `out` and a reference that returns its result.
    ref = KernelCode(
        source_code="class Model(torch.nn.Module):\n    def forward(self, x, y):\n        return x + y\n",
        kernel_type="torch", io=shared_io(),
    )
    custom = KernelCode(
        source_code="def add(x, y, out, n):\n    out[:n] = x + y\n",
        kernel_type="torch", io=shared_io(), metadata={"function_name": "add"},
    )
    result = run(tmp_path, "compare", custom, ref)
    assert result.kernel_exec_result.correctness is True, result


def test_custom_kernel_gets_the_reference_inputs_even_with_other_seeds(tmp_path: Path) -> None:
    ref = KernelCode(
        source_code="class Model(torch.nn.Module):\n    def forward(self, x, y):\n        return x * y\n",
        kernel_type="torch", io=shared_io(1, 2),
    )
    custom = KernelCode(
        source_code="def mul(x, y, out):\n    torch.mul(x, y, out=out)\n",
        kernel_type="torch", io=shared_io(7, 8), metadata={"function_name": "mul"},
    )
    assert run(tmp_path, "compare", custom, ref).kernel_exec_result.correctness is True


def test_unwritten_output_fails(tmp_path: Path) -> None:
    ref = KernelCode(
        source_code="class Model(torch.nn.Module):\n    def forward(self, x, y):\n        return x + y\n",
        kernel_type="torch", io=shared_io(),
    )
    lazy = KernelCode(
        source_code="def add(x, y, out):\n    out[:128] = (x + y)[:128]\n",
        kernel_type="torch", io=shared_io(), metadata={"function_name": "add"},
    )
    result = run(tmp_path, "compare", lazy, ref).kernel_exec_result
    assert result.outcome == Outcome.INCORRECT
    assert "128 of 256 elements" in result.validation_error and "got nan" in result.validation_error


def test_input_count_mismatch_is_named(tmp_path: Path) -> None:
    ref = KernelCode(
        source_code="class Model(torch.nn.Module):\n    def forward(self, x, y):\n        return x + y\n",
        kernel_type="torch", io=shared_io(),
    )
    io = IOContractBuilder().add_input_tensor("x", create_randn_spec([256])).add_output_tensor("out", [256]).build()
    custom = KernelCode(source_code="def f(x, out):\n    out.copy_(x)\n", kernel_type="torch", io=io,
                        metadata={"function_name": "f"})
    result = run(tmp_path, "compare", custom, ref).kernel_exec_result
    assert result.outcome == Outcome.COMPILE_ERROR
    assert "1 input tensor(s) (x) but the reference takes 2" in result.compilation_error


def test_missing_parameter_is_named(tmp_path: Path) -> None:
    kernel = KernelCode(
        source_code="def f(x, z):\n    return x\n", kernel_type="torch", io=shared_io(),
        metadata={"function_name": "f"},
    )
    result = run(tmp_path, "evaluate", kernel).kernel_exec_result
    assert result.outcome == Outcome.COMPILE_ERROR
    assert "needs parameter(s) z" in result.compilation_error


def test_auto_generated_inputs_when_nothing_says_otherwise(tmp_path: Path) -> None:
    kernel = KernelCode(
        source_code="class Model(torch.nn.Module):\n    def forward(self, a, b):\n        return a - b\n",
        kernel_type="torch",
    )
    result = run(tmp_path, "evaluate", kernel).kernel_exec_result
    assert result.compiled and result.metadata["outputs"] == ["float32[1024]"]


def test_validate_does_not_time(tmp_path: Path) -> None:
    kernel = KernelCode(source_code="class Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n",
                        kernel_type="torch", io=shared_io())
    result = run(tmp_path, "validate", kernel).kernel_exec_result
    assert result.outcome == Outcome.SUCCESS and result.runtime_stats is None


def test_missing_backend_is_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    from compilation import registry

    monkeypatch.setattr(registry, "BACKENDS", {})
    kernel = KernelCode(source_code="x", kernel_type="triton")
    result = run(tmp_path, "evaluate", kernel).kernel_exec_result
    assert "kernel_type 'triton' has no backend" in result.compilation_error
