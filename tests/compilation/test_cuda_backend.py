"""The CUDA backend: source parsing and launch planning (CPU), compilers, and GPU runs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from kernel_eval_client.io_contract import ArgSpec, IOContract, IOContractBuilder, create_randn_spec

from compilation.base import CompileContext, CompileError
from compilation.cuda_backend import (
    CPU_MODE_MESSAGE,
    CudaBackend,
    CudaParam,
    cubin_kernel_names,
    find_cuda_tool,
    find_kernels,
    match_symbol,
    nvcc_compile,
    nvrtc_compile,
    parse_params,
    plan_launch,
    scalar_ctype,
)
from shared.models import KernelCode, KernelMetadata, KernelType

HAS_CUDA = torch.cuda.is_available()
gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
REPO = Path(__file__).resolve().parents[2]

VECTOR_ADD = """
__global__ void vector_add(float* a, float* b, float* c, int n) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    if (tid < n) {
        c[tid] = a[tid] + b[tid];
    }
}
"""

SEVERAL = """
#include <cstdint>
// __global__ void in_a_comment(int x)
template <typename T>
__global__ void scale(T* x, T factor, int64_t n) { }
extern "C" __global__ void __launch_bounds__(256, 2)
fill(float* __restrict__ out, const double value, size_t n) { }
namespace ns {
__global__ void inner(const float* a, float b[], unsigned int n, bool flag) { }
}
__global__ void declared_only(long long n);
/* __global__ void in_a_block_comment(float* y) */
#define LAUNCHER __global__
"""

DOES_NOT_COMPILE = """
__global__ void vector_add(float* a, float* b, float* c, int n) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    c[tid] = a[tid] + undefined_name;
}
"""


def vector_io(n: int = 4096, block: int | None = 256, grid: int | str = 16) -> IOContract:
    builder = (
        IOContractBuilder()
        .add_input_tensor("a", create_randn_spec([n], seed=1))
        .add_input_tensor("b", create_randn_spec([n], seed=2))
        .add_output_tensor("c", [n])
        .add_scalar("n", "int", n)
        .set_grid(grid)
    )
    if block is not None:
        builder.set_block(block)
    return builder.build()


def cuda_kernel(source: str, io: IOContract | None = None, **metadata: object) -> KernelCode:
    return KernelCode(source_code=source, kernel_type=KernelType.CUDA,
                      io=io if io is not None else vector_io(),
                      metadata=KernelMetadata(**metadata) if metadata else None)


# ---- parsing (CPU) --------------------------------------------------------------------------


def test_finds_kernels_and_skips_comments_and_macros() -> None:
    kernels = find_kernels(SEVERAL)
    assert [k.name for k in kernels] == ["scale", "fill", "inner", "declared_only"]
    assert kernels[3].params == [CudaParam("n", "long long", False)]
    assert kernels[1].params == [
        CudaParam("out", "float*", True), CudaParam("value", "double", False),
        CudaParam("n", "size_t", False),
    ]
    assert kernels[2].params == [
        CudaParam("a", "float*", True), CudaParam("b", "float", True),
        CudaParam("n", "unsigned int", False), CudaParam("flag", "bool", False),
    ]


def test_parse_params_handles_templates_and_unnamed_parameters() -> None:
    assert parse_params(
        "const std::pair<int, float>* p, int, float* = nullptr, unsigned long long"
    ) == [
        CudaParam("p", "pair<int, float>*", True), CudaParam("", "int", False),
        CudaParam("", "float*", True), CudaParam("", "unsigned long long", False),
    ]
    assert parse_params("void") == []


def _scalar(kind: str, value: object) -> ArgSpec:
    return ArgSpec(name="v", type=kind, value=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ctype", "kind", "value", "expected"),
    [
        ("int", "int", 7, np.int32),
        ("long", "int", 7, np.int64),
        ("long long", "int", 7, np.int64),
        ("int64_t", "int", 2**40, np.int64),
        ("size_t", "int", 7, np.uint64),
        ("unsigned int", "int", 7, np.uint32),
        ("short", "int", 7, np.int16),
        ("float", "float", 0.5, np.float32),
        ("float", "int", 3, np.float32),  # an int value for a float parameter is converted
        ("double", "float", 0.5, np.float64),
        ("half", "float", 0.5, np.float16),
        ("bool", "bool", True, np.bool_),
        ("T", "int", 7, np.int32),  # unknown type: by the IOContract's type
        ("T", "float", 0.5, np.float32),
        ("T", "bool", False, np.bool_),
    ],
)
def test_scalar_types_follow_the_kernel_declaration(
    ctype: str, kind: str, value: object, expected: type
) -> None:
    assert scalar_ctype(CudaParam("v", ctype, False), _scalar(kind, value)) is expected


def test_float_value_for_an_integer_parameter_is_refused() -> None:
    with pytest.raises(CompileError, match="'v' is a float but parameter 'v' \\(int\\)"):
        scalar_ctype(CudaParam("v", "int", False), _scalar("float", 1.5))


def test_value_out_of_range_for_the_c_type_is_refused() -> None:
    with pytest.raises(CompileError, match="does not fit parameter 'v' \\(int\\)"):
        scalar_ctype(CudaParam("v", "int", False), _scalar("int", 2**31))


# ---- launch planning (CPU) ------------------------------------------------------------------


def test_plan_for_the_api_guide_example() -> None:
    plan = plan_launch(VECTOR_ADD, vector_io(), "vector_add")
    assert (plan.kernel_name, plan.grid, plan.block, plan.shared_mem) == (
        "vector_add", (16, 1, 1), (256, 1, 1), 0,
    )
    assert plan.ctypes == [None, None, None, np.int32]
    assert plan_launch(VECTOR_ADD, vector_io(), None).kernel_name == "vector_add"  # the only one


def test_several_kernels_need_a_kernel_name() -> None:
    with pytest.raises(CompileError, match="several .*scale, fill, inner, declared_only.*"
                                           "kernel_name"):
        plan_launch(SEVERAL, vector_io(), None)


def test_unknown_kernel_name_lists_the_kernels() -> None:
    with pytest.raises(CompileError, match="'nope' is not .* scale, fill, inner"):
        plan_launch(SEVERAL, vector_io(), "nope")


def test_template_and_namespaced_kernel_names_find_their_parameters() -> None:
    io = (IOContractBuilder().add_inout_tensor("x", create_randn_spec([8]))
          .add_scalar("factor", "float", 2.0).add_scalar("n", "int", 8)
          .set_grid(1).set_block(32).build())
    plan = plan_launch(SEVERAL, io, "scale<float>")
    assert plan.ctypes == [None, np.float32, np.int64]  # T factor: by IOContract type


def _drop_last_arg(io: IOContract) -> None:
    io.args.pop()


def _scalar_for_pointer(io: IOContract) -> None:
    io.args[2] = ArgSpec(name="c", type="int", value=1)


def _tensor_for_scalar(io: IOContract) -> None:
    io.args[3] = io.args[0].model_copy(update={"name": "n"})


def _double_tensor_for_float_pointer(io: IOContract) -> None:
    io.args[0] = io.args[0].model_copy(
        update={"tensor_spec": create_randn_spec([4096], dtype="float64")}
    )


def _no_block(io: IOContract) -> None:
    assert io.launch is not None
    io.launch.block = None


def _huge_block(io: IOContract) -> None:
    assert io.launch is not None and io.launch.block is not None
    io.launch.block.x = 2048


def _grid_with_unknown_name(io: IOContract) -> None:
    assert io.launch is not None and io.launch.grid is not None
    io.launch.grid.x = "cdiv(m, 256)"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_drop_last_arg, "takes 4 parameters .* IOContract has 3 args"),
        (_scalar_for_pointer,
         r"'float\* c' is a pointer but IOContract argument 'c' is a scalar \(int\)"),
        (_tensor_for_scalar, "'int n' is a scalar but IOContract argument 'n' is a tensor"),
        (_double_tensor_for_float_pointer,
         "'float\\* a' points to float but IOContract tensor 'a' is float64"),
        (_no_block, "need launch.grid and launch.block"),
        (_huge_block, "exceeds the 1024 threads"),
        (_grid_with_unknown_name, "unknown name 'm'"),
    ],
)
def test_contract_mismatches_name_the_argument(
    mutate: Callable[[IOContract], None], message: str
) -> None:
    io = vector_io()
    mutate(io)
    with pytest.raises(CompileError, match=message):
        plan_launch(VECTOR_ADD, io, "vector_add")


def test_grid_may_be_an_expression_over_integer_arguments() -> None:
    plan = plan_launch(VECTOR_ADD, vector_io(n=1000, grid="cdiv(n, 256)"), "vector_add")
    assert plan.grid == (4, 1, 1)


# ---- CPU mode -------------------------------------------------------------------------------


def test_cpu_mode_refuses_before_importing_cupy(tmp_path: Path) -> None:
    code = f"""
import sys
from pathlib import Path
from compilation.base import CompileContext, CompileError
from compilation.cuda_backend import CudaBackend
from shared.models import KernelCode
kernel = KernelCode.model_validate_json({cuda_kernel(VECTOR_ADD).model_dump_json()!r})
ctx = CompileContext("cpu", Path({str(tmp_path)!r}) / "job", Path({str(tmp_path)!r}) / "cache")
try:
    CudaBackend().compile(kernel, ctx)
except CompileError as exc:
    print(exc)
print("cupy imported:", "cupy" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, check=True)
    assert done.stdout.splitlines() == [CPU_MODE_MESSAGE, "cupy imported: False"]


# ---- compilers without a GPU (where the toolchain is installed) -------------------------------


def _nvrtc_available() -> bool:
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception:  # noqa: BLE001 - no CuPy, or no libnvrtc
        return False
    return True


needs_nvcc = pytest.mark.skipif(find_cuda_tool("nvcc") is None, reason="needs nvcc")
needs_nvrtc = pytest.mark.skipif(not _nvrtc_available(), reason="needs CuPy and libnvrtc")


@needs_nvcc
def test_nvcc_cubin_symbols_resolve_kernel_names(tmp_path: Path) -> None:
    source = SEVERAL.replace("__global__ void declared_only(long long n);", "") + \
        "template __global__ void scale<float>(float*, float, int64_t);\n" + VECTOR_ADD
    cubin = nvcc_compile(source, (), "90", tmp_path)
    symbols = cubin_kernel_names(cubin.read_bytes())
    assert match_symbol("vector_add", symbols) == "_Z10vector_addPfS_S_i"
    assert match_symbol("fill", symbols) == "fill"  # extern "C"
    assert match_symbol("ns::inner", symbols).startswith("_ZN2ns5innerE")
    assert match_symbol("scale<float>", symbols).startswith("_Z5scaleIfEv")
    with pytest.raises(CompileError, match="no kernel matches kernel_name 'missing'"):
        match_symbol("missing", symbols)


@needs_nvcc
def test_nvcc_error_has_the_line_number(tmp_path: Path) -> None:
    with pytest.raises(CompileError) as info:
        nvcc_compile(DOES_NOT_COMPILE, (), "90", tmp_path)
    message = str(info.value)
    assert message.startswith("nvcc compilation failed:")
    assert 'kernel.cu(4): error: identifier "undefined_name" is undefined' in message


@needs_nvrtc
def test_nvrtc_ptx_and_error_line_numbers() -> None:
    ptx = nvrtc_compile(VECTOR_ADD, ("--use_fast_math",), "vector_add", "compute_90").decode()
    assert ".entry _Z10vector_addPfS_S_i" in ptx
    with pytest.raises(CompileError) as info:
        nvrtc_compile(DOES_NOT_COMPILE, (), "vector_add", "compute_90")
    assert 'kernel.cu(4): error: identifier "undefined_name" is undefined' in str(info.value)


# ---- on a GPU -------------------------------------------------------------------------------


def _run(kernel: KernelCode, ctx: CompileContext) -> tuple[list[torch.Tensor], torch.Tensor]:
    built = CudaBackend().compile(kernel, ctx)
    args = built.make_inputs(0)
    inputs = [t.clone() for t in args.input_tensors()]
    (out,) = built.run(args)
    torch.cuda.synchronize()
    return inputs, out


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("backend", ["nvrtc", "nvcc"])
def test_vector_add_is_correct(ctx: CompileContext, backend: str) -> None:
    kernel = cuda_kernel(VECTOR_ADD, kernel_name="vector_add", backend=backend,
                         compiler_options=["--use_fast_math"])
    (a, b), c = _run(kernel, ctx)
    torch.testing.assert_close(c, a + b)


@pytest.mark.gpu
@gpu
def test_an_incorrect_kernel_gives_different_output(ctx: CompileContext) -> None:
    (a, b), c = _run(cuda_kernel(VECTOR_ADD.replace("a[tid] + b[tid]", "a[tid] - b[tid]")), ctx)
    assert not torch.allclose(c, a + b)
    torch.testing.assert_close(c, a - b)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("backend", ["nvrtc", "nvcc"])
def test_compile_error_reports_the_line(ctx: CompileContext, backend: str) -> None:
    with pytest.raises(CompileError) as info:
        CudaBackend().compile(cuda_kernel(DOES_NOT_COMPILE, backend=backend), ctx)
    assert "kernel.cu(4): error" in str(info.value) and "undefined_name" in str(info.value)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("backend", ["nvrtc", "nvcc"])
def test_ptx_is_returned_on_request(ctx: CompileContext, backend: str) -> None:
    built = CudaBackend().compile(cuda_kernel(VECTOR_ADD, backend=backend, return_artifacts=True),
                                  ctx)
    assert ".entry _Z10vector_addPfS_S_i" in built.artifacts["ptx"]
    if backend == "nvcc" and find_cuda_tool("cuobjdump"):
        assert "vector_add" in built.artifacts["sass"]


@pytest.mark.gpu
@gpu
def test_wide_scalars_and_dynamic_shared_memory(ctx: CompileContext) -> None:
    source = """
extern "C" __global__ void axpy(const double* x, double* y, double alpha, long long n) {
    extern __shared__ double tile[];
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.0;
    __syncthreads();
    if (i < n) y[i] = alpha * tile[threadIdx.x] + y[i];
}
"""
    n = 1000
    io = (
        IOContractBuilder()
        .add_input_tensor("x", create_randn_spec([n], dtype="float64", seed=3))
        .add_inout_tensor("y", create_randn_spec([n], dtype="float64", seed=4))
        .add_scalar("alpha", "float", 0.25)
        .add_scalar("n", "int", n)
        .set_grid("cdiv(n, 128)").set_block(128).set_shared_mem(128 * 8)
        .build()
    )
    built = CudaBackend().compile(cuda_kernel(source, io), ctx)
    args = built.make_inputs(0)
    x, y = args.values[0].clone(), args.values[1].clone()
    (result,) = built.run(args)
    torch.cuda.synchronize()
    torch.testing.assert_close(result, 0.25 * x + y)
