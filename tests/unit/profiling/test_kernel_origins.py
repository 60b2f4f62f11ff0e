"""Where a launched kernel came from (profiling.kernel_origins): names as CUPTI records them on
NVIDIA GPUs (mangled C++ names, demangled ones, Triton's and the DSLs' plain ones), against the
kernels a job's source defines."""

from __future__ import annotations

import pytest

from profiling.kernel_origins import (
    ANONYMOUS,
    Origin,
    OwnKernels,
    classify,
    computes_in_tf32,
    cuda_kernel_names,
    own_kernels,
    qualified_name,
)
from shared.models import KernelCode

NONE = OwnKernels()


def code(source: str, kernel_type: str = "torch", **meta: str) -> KernelCode:
    data: dict = {"source_code": source, "kernel_type": kernel_type}
    if meta:
        data["metadata"] = meta
    return KernelCode.model_validate(data)


TRITON_SOURCE = '''
import torch
import triton
import triton.language as tl

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

@triton.autotune(configs=[triton.Config({"BLOCK": 128})], key=["n"])
@triton.jit(do_not_specialize=["n"])
def scale_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass

def not_a_kernel(x):
    return x
'''

LOAD_INLINE_SOURCE = r'''
import torch
from torch.utils.cpp_extension import load_inline

cuda_src = """
#include <torch/extension.h>
// __global__ kernels below; the host function launches them
template <int BLOCK>
__global__ void __launch_bounds__(256) row_sum(const float* __restrict__ x, float* out, int n) {}

namespace mine {
__global__ void scale(float* x, float s, int n) { }
}

extern "C" __global__
void relu_kernel(const float* x, float* y, int n) { }

torch::Tensor run(torch::Tensor x) { return x; }
"""
module = load_inline(name="ext", cpp_sources="torch::Tensor run(torch::Tensor x);",
                     cuda_sources=cuda_src, functions=["run"])

class ModelNew(torch.nn.Module):
    def forward(self, x):
        return module.run(x)
'''


def test_the_kernels_a_triton_source_defines_are_its_jit_functions() -> None:
    own = own_kernels(code(TRITON_SOURCE))
    assert own.names == {"add_kernel", "scale_kernel"}
    assert own.languages == ("triton",)
    assert own.prefixes == set() and own.namespaces == set()


def test_triton_imported_under_other_names_is_still_seen() -> None:
    source = ("from triton import jit as tjit\nimport triton as tt\n"
              "@tjit\ndef a(x):\n    pass\n@tt.jit\ndef b(x):\n    pass\n"
              "@some.other.jit\ndef c(x):\n    pass\n")
    assert own_kernels(code(source)).names == {"a", "b"}


def test_the_global_functions_of_cuda_strings_are_the_sources_kernels() -> None:
    assert cuda_kernel_names(LOAD_INLINE_SOURCE) == ["row_sum", "scale", "relu_kernel"]
    own = own_kernels(code(LOAD_INLINE_SOURCE, "torch_cuda"))
    assert own.names == {"row_sum", "scale", "relu_kernel"}
    assert own.languages == ("cuda",)


def test_a_cuda_sources_kernel_name_and_included_libraries_count_as_its_own() -> None:
    source = ('#include <cutlass/gemm/device/gemm.h>\n#include "cub/cub.cuh"\n'
              'extern "C" __global__ void saxpy(float a, const float* x, float* y) {}\n')
    own = own_kernels(code(source, "cuda", kernel_name="saxpy"))
    assert own.names == {"saxpy"}
    assert own.namespaces == {"cutlass", "cub"}


@pytest.mark.parametrize(("source", "names", "prefixes", "language"), [
    (("import helion\nimport helion.language as hl\n@helion.kernel(config=None)\n"
     "def add(x, y):\n    pass\n"), set(), {"_helion_add"}, "helion"),
    (("import cutlass\nimport cutlass.cute as cute\n@cute.kernel\n"
     "def elementwise_add_kernel(a, b, c):\n    pass\n@cute.jit\ndef host(a):\n    pass\n"),
     set(), {"kernel_cutlass_"}, "cute_dsl"),
    (("from cutlass import cute\nclass Gemm:\n    @cute.kernel\n    def kernel(self, a):\n"
     "        pass\n"), set(), {"kernel_cutlass_"}, "cute_dsl"),
    (("import tilelang\nimport tilelang.language as T\n@tilelang.jit(out_idx=[-1])\n"
     "def matmul(M, N, K):\n    @T.prim_func\n    def main(A, B, C):\n        pass\n"
     "    return main\n"), {"main_kernel"}, set(), "tilelang"),
    ("import cuda.tile as ct\n@ct.kernel\ndef vec_add(a, b, c):\n    pass\n",
     {"vec_add"}, set(), "cutile"),
])
def test_the_kernels_a_dsl_source_compiles_are_named_by_its_rules(
        source: str, names: set[str], prefixes: set[str], language: str) -> None:
    own = own_kernels(code(source))
    assert own.names == names and own.prefixes == prefixes and own.languages == (language,)


def test_a_source_of_plain_torch_defines_no_kernel() -> None:
    own = own_kernels(code("class Model(torch.nn.Module):\n    def forward(self, a, b):\n"
                           "        return a @ b\n"))
    assert not own and own.listed() == []


@pytest.mark.parametrize(("name", "demangled", "parts"), [
    ("_Z11relu_kernelPKfPfi", None, ["relu_kernel"]),
    ("_Z7row_sumILi256EEvPKfPfi", None, ["row_sum"]),
    ("_ZN4mine5scaleEPffi", None, ["mine", "scale"]),
    ("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_",
     None, ["at", "native", "vectorized_elementwise_kernel"]),
    ("_ZN12_GLOBAL__N_120softmax_warp_forwardIfffLi10ELb0ELb0EEEvPT0_PKT_iiiPKbib", None,
     [ANONYMOUS, "softmax_warp_forward"]),
    ("_ZL10add_kernelPfS_i", None, ["add_kernel"]),
    ("_ZN3cub17CUB_200200_900_NS18DeviceReduceKernelINS0_6detail6policyEEEvv", None,
     ["cub", "CUB_200200_900_NS", "DeviceReduceKernel"]),
    ("x", ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
     "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)"),
     ["at", "native", ANONYMOUS, "cunn_SoftMaxForward"]),
    (("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
     "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()"
     "(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4> >"
     "(at::native::ReduceOp<float, ...>)"), None, ["at", "native", "reduce_kernel"]),
    ("add_kernel", None, ["add_kernel"]),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", None,
     ["nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT"]),
    ("", None, []),
])
def test_qualified_names_are_read_mangled_or_demangled(
        name: str, demangled: str | None, parts: list[str]) -> None:
    assert qualified_name(name, demangled) == parts


TRITON_OWN = own_kernels(code(TRITON_SOURCE))
CUDA_OWN = own_kernels(code(LOAD_INLINE_SOURCE, "torch_cuda"))
CUTLASS_OWN = own_kernels(code("#include <cutlass/cutlass.h>\n"
                               "__global__ void epilogue(float* x) {}\n", "cuda"))


@pytest.mark.parametrize(("name", "demangled", "own", "origin", "what"), [
    # the source's own
    ("add_kernel", None, TRITON_OWN, Origin.OWN, "add_kernel"),
    ("add_kernel_0d1d2d3de", None, TRITON_OWN, Origin.OWN, "add_kernel"),  # Triton 2 names
    ("_Z11relu_kernelPKfPfi", None, CUDA_OWN, Origin.OWN, "relu_kernel"),
    ("_Z7row_sumILi256EEvPKfPfi", "void row_sum<256>(float const*, float*, int)", CUDA_OWN,
     Origin.OWN, "row_sum"),
    ("_ZN4mine5scaleEPffi", None, CUDA_OWN, Origin.OWN, "scale"),
    ("relu_kernel", None, CUDA_OWN, Origin.OWN, "relu_kernel"),  # extern "C"
    ("_helion_add", None, OwnKernels(prefixes=frozenset({"_helion_add"})), Origin.OWN,
     "_helion_add"),
    ("kernel_cutlass_elementwise_add_kernel_tensorptrf32gmemo1024i641_0", None,
     OwnKernels(prefixes=frozenset({"kernel_cutlass_"})), Origin.OWN, "kernel_cutlass_"),
    ("main_kernel", None, OwnKernels(names=frozenset({"main_kernel"})), Origin.OWN, "main_kernel"),
    ("_ZN7cutlass6KernelINS_4gemm6kernel4GemmINS1_11threadblock12MmaPipelinedEEEEEvNT_6ParamsE",
     ("void cutlass::Kernel<cutlass::gemm::kernel::Gemm<cutlass::gemm::threadblock::MmaPipelined"
     "<cutlass::gemm::GemmShape<128, 128, 8>, float> > >(cutlass::gemm::kernel::Gemm<...>::Params)"),
     CUTLASS_OWN, Origin.OWN, "cutlass::"),
    # libraries
    (("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_"
     "segment_k_off_kernel__5x_cublas"), None, NONE, Origin.LIBRARY, "cuBLAS"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", None, NONE, Origin.LIBRARY, "cuBLAS"),
    ("ampere_sgemm_128x64_nn", None, NONE, Origin.LIBRARY, "cuBLAS"),
    ("_ZN8cublasLt19splitKreduce_kernelILi32ELi16EiffffLb0ELb1ELb0EEEvNS_18cublasSplitKParamsIfEE",
     ("void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, true, "
     "false>(cublasLt::cublasSplitKParams<float>, float const*)"), NONE, Origin.LIBRARY, "cuBLAS"),
    (("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, "
     "cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, float> >(...)"), None,
     NONE, Origin.LIBRARY, "cuBLAS"),
    # cuBLAS's own CUTLASS kernels stay cuBLAS's even where the source includes CUTLASS
    (("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x5_tn_align4>"
     "(cutlass_80_tensorop_s1688gemm_128x128_16x5_tn_align4::Params)"), None, CUTLASS_OWN,
     Origin.LIBRARY, "cuBLAS"),
    ("void cutlass::Kernel<cutlass::gemm::kernel::Gemm<float> >(int)", None, NONE,
     Origin.LIBRARY, "CUTLASS"),
    (("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_"
     "warpsize2x2x1_g1_tensor16x8x8_alignc4_execute_kernel__5x_cudnn"), None, NONE,
     Origin.LIBRARY, "cuDNN"),
    (("void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true, "
     "(cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, "
     "float const*, float*)"), None, NONE, Origin.LIBRARY, "cuDNN"),
    (("void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>"
     "(int, int, int, float const*, int, float*, float const*, kernel_conv_params, "
     "unsigned long long, int, float, float, int, float const*, float const*, bool, int, int)"),
     None, NONE, Origin.LIBRARY, "cuDNN"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", None, NONE,
     Origin.LIBRARY, "NCCL"),
    (("void vector_fft<64u, EPT<8u>, 8u, 2u, (padding_t)1, (twiddle_t)0, (loadstore_modifier_t)2, "
     "(layout_t)1, unsigned int, float>(kernel_arguments_t<unsigned int>)"), None, NONE,
     Origin.LIBRARY, "cuFFT"),
    ("_ZN3cub17CUB_200200_900_NS18DeviceReduceKernelINS0_6detail6policyEEEvv", None, NONE,
     Origin.LIBRARY, "CUB"),
    (("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
     "cutlass::half_t>, false, false, false, false, true, true, false>(flash::Flash_fwd_params)"),
     None, NONE, Origin.LIBRARY, "FlashAttention"),
    ("cupy_add__float32_float32_float32", None, NONE, Origin.LIBRARY, "CuPy"),
    # the framework
    (("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
     "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)"),
     None, NONE, Origin.FRAMEWORK, "ATen"),
    ("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_",
     None, NONE, Origin.FRAMEWORK, "ATen"),
    # a kernel the source happens to name as ATen does is still ATen's when ATen launched it
    ("void at::native::vectorized_elementwise_kernel<4>(int)", None,
     OwnKernels(names=frozenset({"vectorized_elementwise_kernel"})), Origin.FRAMEWORK, "ATen"),
    (("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>"
     "(float*, float const*, int, int, int, bool const*, int, bool)"), None, NONE,
     Origin.FRAMEWORK, "ATen"),
    ("void at_cuda_detail::cub::DeviceRadixSortOnesweepKernel<int>(int)", None, NONE,
     Origin.FRAMEWORK, "ATen"),
    (("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4> >"
     "(pytorch_flash::Flash_fwd_params)"), None, NONE, Origin.FRAMEWORK, "flash"),
    (("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, "
     "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)"), None, NONE,
     Origin.FRAMEWORK, "memory-efficient"),
    # generated by TorchInductor
    ("triton_poi_fused_add_mul_0", None, NONE, Origin.GENERATED, "Inductor"),
    ("triton_per_fused__softmax_0", None, NONE, Origin.GENERATED, "Inductor"),
    ("triton_red_fused_sum_1", None, NONE, Origin.GENERATED, "Inductor"),
    ("triton_tem_fused_mm_0", None, NONE, Origin.GENERATED, "Inductor"),
    # a source's Triton kernel that looks generated is still its own
    ("triton_poi_fused_mine", None, OwnKernels(names=frozenset({"triton_poi_fused_mine"})),
     Origin.OWN, "triton_poi_fused_mine"),
    ("a_mystery", None, NONE, Origin.UNKNOWN, "not recognised"),
])
def test_a_launch_is_classed_by_its_name_and_the_sources_kernels(
        name: str, demangled: str | None, own: OwnKernels, origin: Origin, what: str) -> None:
    found = classify(name, own, demangled)
    assert found.origin == origin, found
    assert what in found.source


def test_memory_operations_are_memory_whatever_their_name() -> None:
    assert classify("DtoD", CUDA_OWN, kind="memcpy").origin == Origin.MEMORY
    assert classify("relu_kernel", CUDA_OWN, kind="memset").origin == Origin.MEMORY


def test_a_kernel_of_another_name_than_the_sources_is_not_its_own() -> None:
    # (the source's "scale" is not "scale_rows", nor "add_kernel" a prefix of everything)
    assert classify("_Z10scale_rowsPf", CUDA_OWN).origin == Origin.UNKNOWN
    assert classify("add_kernel_fast", TRITON_OWN).origin == Origin.UNKNOWN


@pytest.mark.parametrize(("name", "tf32"), [
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_execute_kernel__5x_cublas", True),
    ("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_kernel__5x_cudnn", True),
    ("cutlass_tensorop_s1688gemm_tf32_128x128_32x3_nn_align4", True),
    ("cutlass_tensorop_s1688gemm_3xtf32_128x128_32x3_nn_align4", False),  # float32 emulated
    ("ampere_sgemm_128x64_nn", False),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", False),
])
def test_kernels_that_compute_in_tf32_say_so_in_their_names(name: str, tf32: bool) -> None:
    assert computes_in_tf32(name) is tf32
