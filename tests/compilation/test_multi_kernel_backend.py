"""multi_kernel: a Python entry point mixing torch and Triton, bound to the IOContract by name."""

from __future__ import annotations

import pytest
import torch
from kernel_eval_client.io_contract import IOContract, IOContractBuilder, create_randn_spec

from compilation.base import CompileContext, CompileError, user_traceback
from compilation.multi_kernel_backend import MultiKernelBackend
from shared.models import KernelCode, KernelMetadata, KernelType

MIXED = '''
import torch
import triton
import triton.language as tl

@triton.jit
def scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * factor, mask=mask)

def fused(y, x, factor):
    scaled = torch.empty_like(x)
    n = x.numel()
    scale_kernel[(triton.cdiv(n, 128),)](x, scaled, n, factor, BLOCK=128)
    return torch.relu(scaled + y)

def into_buffer(x, out):
    out.copy_(x * 3)

def broken(x):
    return x / 0 if False else undefined_helper(x)
'''


def io() -> IOContract:
    return (
        IOContractBuilder()
        .add_input_tensor("x", create_randn_spec([300], seed=1))
        .add_input_tensor("y", create_randn_spec([300], seed=2))
        .add_scalar("factor", "float", 2.5)
        .add_output_tensor("out", [300])
        .build()
    )


def multi(source: str, contract: IOContract | None, entry_point: str | None) -> KernelCode:
    return KernelCode(source_code=source, kernel_type=KernelType.MULTI_KERNEL, io=contract,
                      metadata=KernelMetadata(entry_point=entry_point))


def test_torch_and_triton_in_one_entry_point(ctx: CompileContext) -> None:
    kernel = MultiKernelBackend().compile(multi(MIXED, io(), "fused"), ctx)
    args = kernel.make_inputs(0)
    x, y = args.values[0].clone(), args.values[1].clone()
    (result,) = kernel.run(args)  # parameters bound by name: fused(y=..., x=..., factor=...)
    torch.testing.assert_close(result, torch.relu(x * 2.5 + y))


def test_returning_none_yields_the_output_buffers(ctx: CompileContext) -> None:
    kernel = MultiKernelBackend().compile(multi(MIXED, io(), "into_buffer"), ctx)
    args = kernel.make_inputs(0)
    (result,) = kernel.run(args)
    assert result is args.values[3]
    torch.testing.assert_close(result, args.values[0] * 3)


def test_prepare_gives_the_bare_call_for_timing(ctx: CompileContext) -> None:
    kernel = MultiKernelBackend().compile(multi(MIXED, io(), "fused"), ctx)
    args = kernel.make_inputs(0)
    x, y = args.values[0].clone(), args.values[1].clone()
    torch.testing.assert_close(kernel.prepare(args)(), torch.relu(x * 2.5 + y))


def test_fresh_inputs_per_trial(ctx: CompileContext) -> None:
    kernel = MultiKernelBackend().compile(multi(MIXED, io(), "fused"), ctx)
    assert not torch.equal(kernel.make_inputs(0).values[0], kernel.make_inputs(1).values[0])


def test_entry_point_is_required(ctx: CompileContext) -> None:
    with pytest.raises(CompileError, match="metadata.entry_point"):
        MultiKernelBackend().compile(multi(MIXED, io(), None), ctx)


def test_io_contract_is_required(ctx: CompileContext) -> None:
    with pytest.raises(CompileError, match="needs an IOContract"):
        MultiKernelBackend().compile(multi(MIXED, None, "fused"), ctx)


def test_undefined_entry_point_lists_the_functions(ctx: CompileContext) -> None:
    with pytest.raises(CompileError, match="'run' is not defined.*broken, fused, into_buffer"):
        MultiKernelBackend().compile(multi(MIXED, io(), "run"), ctx)


def test_runtime_error_propagates_with_the_user_traceback(ctx: CompileContext) -> None:
    kernel = MultiKernelBackend().compile(multi(MIXED, io(), "broken"), ctx)
    with pytest.raises(NameError) as info:
        kernel.run(kernel.make_inputs(0))
    report = user_traceback(info.value)
    assert "in broken" in report and "undefined_helper" in report


def test_import_error_is_a_compile_error_with_its_line(ctx: CompileContext) -> None:
    source = "import torch\n\nraise RuntimeError('bad module')\n\ndef fused(x):\n    return x\n"
    with pytest.raises(CompileError, match="line 3") as info:
        MultiKernelBackend().compile(multi(source, io(), "fused"), ctx)
    assert "bad module" in str(info.value)


def test_a_gpu_only_import_in_cpu_mode_says_it_needs_a_cuda_gpu(ctx: CompileContext) -> None:
    """Not a raw ModuleNotFoundError: the answer a cuda or torch_cuda kernel gets in CPU mode."""
    source = "import torch\nimport cupy\n\ndef fused(y, x, factor):\n    return x\n"
    if ctx.device != "cpu":
        pytest.skip("CPU mode only")
    try:
        import cupy  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("CuPy is installed here: the import would succeed")
    with pytest.raises(CompileError, match="imports cupy, which needs a CUDA GPU"):
        MultiKernelBackend().compile(multi(source, io(), "fused"), ctx)


def test_another_missing_module_is_still_the_import_error(ctx: CompileContext) -> None:
    source = "import torch\nimport no_such_module_here\n\ndef fused(y, x, factor):\n    return x\n"
    with pytest.raises(CompileError, match="No module named 'no_such_module_here'"):
        MultiKernelBackend().compile(multi(source, io(), "fused"), ctx)
