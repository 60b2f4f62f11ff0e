"""The Triton backend: launch from the IOContract, kernel selection, contract checks, errors.

Runs on this host's device: under Triton's interpreter without a GPU (conftest sets
TRITON_INTERPRET=1), compiled for real on a GPU host.
"""

from __future__ import annotations

import pytest
import torch
from kernel_eval_client.io_contract import (
    IOContract,
    IOContractBuilder,
    create_randn_spec,
)

from compilation.base import CompileContext, CompileError, load_module
from compilation.triton_backend import TritonBackend, compile_error_message
from shared.models import KernelCode, KernelMetadata, KernelType

HAS_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if HAS_CUDA else "cpu"

ADD = '''
import triton
import triton.language as tl

@triton.jit
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, x + y, mask=mask)
'''

TWO_KERNELS = ADD + '''
@triton.jit
def mul_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, x * y, mask=mask)
'''

WITH_HELPER = '''
import triton
import triton.language as tl

@triton.jit
def twice(v):
    return v * 2

@triton.jit
def double_kernel(x_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(output_ptr + offsets, twice(tl.load(x_ptr + offsets, mask=mask)), mask=mask)
'''

AUTOTUNED = '''
import triton
import triton.language as tl

@triton.autotune(
    configs=[triton.Config({"BLOCK_SIZE": 64}), triton.Config({"BLOCK_SIZE": 128})],
    key=["n_elements"],
)
@triton.jit
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, x + y, mask=mask)
'''

MATMUL = '''
import triton
import triton.language as tl

@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                  stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] + k < K), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] + k < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
'''

DOES_NOT_COMPILE = '''
import triton
import triton.language as tl

@triton.jit
def broken_kernel(x_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    tl.store(output_ptr + offsets, undefined_scale * tl.load(x_ptr + offsets))
'''


def add_io(n: int = 1000, grid: int | str = 4, block: int | None = 256, **launch: int) -> IOContract:
    builder = (
        IOContractBuilder()
        .add_input_tensor("x", create_randn_spec([n], seed=1))
        .add_input_tensor("y", create_randn_spec([n], seed=2))
        .add_output_tensor("output", [n])
        .add_scalar("n_elements", "int", n)
    )
    if block is not None:
        builder.add_meta_param("BLOCK_SIZE", block)
    builder.set_grid(grid)
    if "num_warps" in launch:
        builder.set_num_warps(launch["num_warps"])
    return builder.build()


def unary_io(n: int = 100, block: int = 128) -> IOContract:
    return (
        IOContractBuilder()
        .add_input_tensor("x", create_randn_spec([n], seed=5))
        .add_output_tensor("out", [n])
        .add_scalar("n_elements", "int", n)
        .add_meta_param("BLOCK_SIZE", block)
        .set_grid(1)
        .build()
    )


def triton_kernel(source: str, io: IOContract | None, **metadata: object) -> KernelCode:
    return KernelCode(
        source_code=source, kernel_type=KernelType.TRITON, io=io,
        metadata=KernelMetadata(**metadata) if metadata else None,
    )


def run_once(kernel: KernelCode, ctx: CompileContext) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    built = TritonBackend().compile(kernel, ctx)
    args = built.make_inputs(0)
    inputs = [t.clone() for t in args.input_tensors()]
    return inputs, built.run(args)


def line_of(source: str, marker: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if marker in line)


def test_add_kernel_matches_torch(ctx: CompileContext) -> None:
    (x, y), outputs = run_once(triton_kernel(ADD, add_io()), ctx)
    assert len(outputs) == 1
    assert outputs[0].device.type == DEVICE
    torch.testing.assert_close(outputs[0], x + y)


def test_prepare_gives_the_bare_launch_for_timing(ctx: CompileContext) -> None:
    built = TritonBackend().compile(triton_kernel(ADD, add_io()), ctx)
    args = built.make_inputs(1)
    args.values[2].fill_(0.0)
    built.prepare(args)()
    torch.testing.assert_close(args.values[2], args.values[0] + args.values[1])


def test_matmul_with_a_2d_grid(ctx: CompileContext) -> None:
    m, n, k = 48, 40, 24
    io = (
        IOContractBuilder()
        .add_input_tensor("a", create_randn_spec([m, k], seed=3))
        .add_input_tensor("b", create_randn_spec([k, n], seed=4))
        .add_output_tensor("c", [m, n])
    )
    for name, value in [("M", m), ("N", n), ("K", k), ("stride_am", k), ("stride_ak", 1),
                        ("stride_bk", n), ("stride_bn", 1), ("stride_cm", n), ("stride_cn", 1)]:
        io.add_scalar(name, "int", value)
    for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
        io.add_meta_param(name, 16)
    kernel = triton_kernel(MATMUL, io.set_grid(3, 3).build())
    (a, b), (c,) = run_once(kernel, ctx)
    # tl.dot may use TF32 on a GPU
    torch.testing.assert_close(c, a @ b, atol=5e-2, rtol=5e-2)


def test_kernel_name_picks_one_of_several(ctx: CompileContext) -> None:
    (x, y), (out,) = run_once(triton_kernel(TWO_KERNELS, add_io(), kernel_name="mul_kernel"), ctx)
    torch.testing.assert_close(out, x * y)


def test_several_kernels_without_a_name_are_listed(ctx: CompileContext) -> None:
    with pytest.raises(CompileError, match="kernel_name") as info:
        TritonBackend().compile(triton_kernel(TWO_KERNELS, add_io()), ctx)
    assert "add_kernel" in str(info.value) and "mul_kernel" in str(info.value)


def test_unknown_kernel_name_lists_the_kernels(ctx: CompileContext) -> None:
    with pytest.raises(CompileError, match="'nope'") as info:
        TritonBackend().compile(triton_kernel(TWO_KERNELS, add_io(), kernel_name="nope"), ctx)
    assert "add_kernel, mul_kernel" in str(info.value)


def test_a_jit_helper_called_by_the_kernel_is_not_an_entry_point(ctx: CompileContext) -> None:
    (x,), (out,) = run_once(triton_kernel(WITH_HELPER, unary_io()), ctx)
    torch.testing.assert_close(out, x * 2)


def test_missing_io_contract(ctx: CompileContext) -> None:
    with pytest.raises(CompileError, match="triton kernels need an IOContract"):
        TritonBackend().compile(triton_kernel(ADD, None), ctx)


def test_too_many_arguments(ctx: CompileContext) -> None:
    io = add_io(block=None)
    io.args += [io.args[3].model_copy(update={"name": f"extra{i}"}) for i in (1, 2)]
    with pytest.raises(CompileError, match=r"takes 5 parameters .* passes 6 non-meta") as info:
        TritonBackend().compile(triton_kernel(ADD, io), ctx)
    assert "extra2" in str(info.value)


def test_missing_constexpr_is_named(ctx: CompileContext) -> None:
    with pytest.raises(CompileError, match="BLOCK_SIZE.*is_meta"):
        TritonBackend().compile(triton_kernel(ADD, add_io(block=None)), ctx)


def test_number_where_the_kernel_loads_through_a_pointer(ctx: CompileContext) -> None:
    io = add_io()
    io.args[2], io.args[3] = io.args[3], io.args[2]  # n_elements now lands on output_ptr
    with pytest.raises(CompileError) as info:
        TritonBackend().compile(triton_kernel(ADD, io), ctx)
    message = str(info.value)
    assert f"'output_ptr' as a pointer (line {line_of(ADD, 'tl.store')}" in message
    assert "int argument 'n_elements'" in message
    # and the tensor that landed on n_elements, used as a number in the mask
    assert f"'n_elements' as a number (line {line_of(ADD, 'mask =')}" in message


def test_tensor_where_the_kernel_needs_a_number(ctx: CompileContext) -> None:
    io = add_io()
    io.args[3] = io.args[2].model_copy(update={"name": "n_as_tensor", "role": "input"})
    with pytest.raises(CompileError, match="'n_elements' as a number .* tensor argument"):
        TritonBackend().compile(triton_kernel(ADD, io), ctx)


ACCEPTED_BY_THE_STATIC_CHECK = {
    "scalar offset added to a pointer": """
@triton.jit
def k(x_ptr, start, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + start + offs, tl.load(x_ptr + start + offs))
""",
    "pointers compared with pointers": """
@triton.jit
def k(x_ptr, start, end_ptr, BLOCK: tl.constexpr):
    p = x_ptr + start + tl.arange(0, BLOCK)
    tl.store(p, 1.0, mask=p < end_ptr)
""",
    "a pointer argument moved by a stride": """
@triton.jit
def k(X, stride, Y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    X += row * stride
    Y += row * stride
    cols = tl.arange(0, BLOCK)
    tl.store(Y + cols, tl.load(X + cols))
""",
    "a pointer loaded from a table and cast": """
@triton.jit
def k(table_ptr, n, out_ptr, BLOCK: tl.constexpr):
    p = tl.load(table_ptr).to(tl.pointer_type(tl.float32))
    tl.store(out_ptr + tl.arange(0, BLOCK), tl.load(p + n))
""",
}


@pytest.mark.parametrize("source", ACCEPTED_BY_THE_STATIC_CHECK.values(),
                         ids=list(ACCEPTED_BY_THE_STATIC_CHECK))
def test_static_check_accepts_valid_kernels(ctx: CompileContext, source: str) -> None:
    from compilation.triton_checks import check_argument_kinds, check_contract, select_kernel

    io = (
        IOContractBuilder()
        .add_input_tensor("a", create_randn_spec([64]))
        .add_scalar("b", "int", 0)
        .add_output_tensor("c", [64])
        .add_meta_param("BLOCK", 64)
        .build()
    )
    module = load_module("import triton\nimport triton.language as tl\n" + source, ctx)
    target = select_kernel(module, None)
    check_contract(target, io)
    check_argument_kinds(target, io)  # must not raise


def test_unknown_meta_parameter(ctx: CompileContext) -> None:
    io = add_io()
    io.args.append(io.args[-1].model_copy(update={"name": "BLOCK"}))
    with pytest.raises(CompileError, match="'BLOCK' is not a parameter.*BLOCK_SIZE"):
        TritonBackend().compile(triton_kernel(ADD, io), ctx)


def test_kernel_that_does_not_compile_reports_its_line(ctx: CompileContext) -> None:
    with pytest.raises(CompileError) as info:
        TritonBackend().compile(triton_kernel(DOES_NOT_COMPILE, unary_io()), ctx)
    message = str(info.value)
    assert f"line {line_of(DOES_NOT_COMPILE, 'undefined_scale')}" in message
    assert "undefined_scale" in message and "not defined" in message


def test_gpu_compile_error_message_maps_lines_to_the_source(ctx: CompileContext) -> None:
    """The GPU path's formatter, on a real Triton CompilationError (compiled here, no GPU)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    source = DOES_NOT_COMPILE + '''
@triton.jit
def outer_kernel(x_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    broken_kernel(x_ptr, output_ptr, n_elements, BLOCK_SIZE)
'''
    module = load_module(source, ctx)
    for name in ("broken_kernel", "outer_kernel"):
        fn = getattr(module, name)
        setattr(module, name, fn if isinstance(fn, JITFunction) else JITFunction(fn.fn))
    signature = {"x_ptr": "*fp32", "output_ptr": "*fp32", "n_elements": "i32",
                 "BLOCK_SIZE": "constexpr"}
    src = ASTSource(module.outer_kernel, signature, {(3,): 64})
    from triton.compiler.errors import CompilationError

    with pytest.raises(CompilationError) as info:
        import triton

        triton.compile(src, target=GPUTarget("cuda", 90, 32))
    message = compile_error_message(info.value, "outer_kernel", module)
    # Older Triton (3.6, on the GPU host) has no def_file_line_number: same lines expected.
    for name in ("broken_kernel", "outer_kernel"):
        vars(getattr(module, name)).pop("def_file_line_number", None)
    assert compile_error_message(info.value, "outer_kernel", module) == message
    assert message.startswith(
        f"Triton compile error in 'broken_kernel' at line {line_of(source, 'undefined_scale')}"
    )
    assert f"called from line {line_of(source, '    broken_kernel(')} in 'outer_kernel'" in message


def test_autotuned_kernel_with_a_grid_expression(ctx: CompileContext) -> None:
    io = add_io(n=1000, grid="cdiv(n_elements, BLOCK_SIZE)", block=None, num_warps=8)
    (x, y), (out,) = run_once(triton_kernel(AUTOTUNED, io), ctx)
    torch.testing.assert_close(out, x + y)  # 1000 is not a multiple of either block size


def test_grid_expression_may_use_the_io_contract_names(ctx: CompileContext) -> None:
    io = add_io(n=1000, grid="cdiv(n, BLOCK_SIZE)", block=None)
    io.args[3] = io.args[3].model_copy(update={"name": "n"})  # binds to n_elements by position
    (x, y), (out,) = run_once(triton_kernel(AUTOTUNED, io), ctx)
    torch.testing.assert_close(out, x + y)


def test_autotuned_meta_parameter_in_the_contract_is_refused(ctx: CompileContext) -> None:
    with pytest.raises(CompileError, match="BLOCK_SIZE.*@triton.autotune"):
        TritonBackend().compile(triton_kernel(AUTOTUNED, add_io()), ctx)


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        ("cdiv(n_elements, BLOCK)", "'BLOCK', which is not an integer argument"),
        ("cdiv(x, 256)", "'x', which is not an integer argument"),  # x is a tensor
        ("__import__('os').getpid()", "not allowed"),
        ("n_elements / 256", "true division"),
    ],
)
def test_bad_grid_expressions(ctx: CompileContext, grid: str, message: str) -> None:
    with pytest.raises(CompileError, match=message):
        TritonBackend().compile(triton_kernel(ADD, add_io(grid=grid)), ctx)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_ptx_is_returned_on_request(ctx: CompileContext) -> None:
    built = TritonBackend().compile(triton_kernel(ADD, add_io(), return_artifacts=True), ctx)
    assert ".entry add_kernel" in built.artifacts["ptx"]


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_compiled_for_the_gpu_add_autotune_and_compile_error(ctx: CompileContext) -> None:
    """The tests above run on the GPU too when one is present; these are the essentials."""
    assert ctx.device == "cuda"
    (x, y), (out,) = run_once(triton_kernel(ADD, add_io()), ctx)
    assert out.is_cuda
    torch.testing.assert_close(out, x + y)
    io = add_io(n=1000, grid="cdiv(n_elements, BLOCK_SIZE)", block=None)
    (x, y), (out,) = run_once(triton_kernel(AUTOTUNED, io), ctx)
    torch.testing.assert_close(out, x + y)
    with pytest.raises(CompileError, match="Triton compile error in 'broken_kernel' at line"):
        TritonBackend().compile(triton_kernel(DOES_NOT_COMPILE, unary_io()), ctx)
