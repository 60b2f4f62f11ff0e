"""A result's launch provenance and precision parity (profiling.provenance), from traces of one
call as a kernel's process would report them: which launches were the submission's own, what
share of the device time they took, the flag for an answer that promised kernels of its own
and ran none, and a candidate's math modes looser than its reference's."""

from __future__ import annotations

import json

import pytest

from profiling.provenance import (
    ALWAYS_UNSEEN,
    PARITY_CHECK,
    PROVENANCE_CHECK,
    assemble,
    loosest,
    parity,
)
from shared.models import KernelCode
from shared.observations import CallTrace, MathModes, TracedLaunch

DEFAULTS = MathModes(matmul_tf32=False, cudnn_tf32=True, float32_matmul_precision="highest",
                     fp16_reduced_precision_reduction=True,
                     bf16_reduced_precision_reduction=True, fp16_accumulation=False)
REFERENCE = KernelCode(source_code="class Model(torch.nn.Module):\n    def forward(self, a, b):\n"
                                   "        return a @ b\n", kernel_type="torch")
CUBLAS_GEMM = ("sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_"
               "execute_segment_k_off_kernel__5x_cublas")
TF32_GEMM = ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_"
             "execute_segment_k_off_kernel__5x_cublas")
ATEN_ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
            "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, "
            "std::array<char*, 3ul>)")

CUBLAS_ONLY_TORCH_CUDA = KernelCode(kernel_type="torch_cuda", source_code='''
import torch
from torch.utils.cpp_extension import load_inline
cpp = "torch::Tensor mm(torch::Tensor a, torch::Tensor b) { return torch::matmul(a, b); }"
ext = load_inline(name="mm_ext", cpp_sources=cpp, functions=["mm"])
class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return ext.mm(a, b)
''')
TRITON_NEVER_LAUNCHED = KernelCode(kernel_type="torch", source_code='''
import torch
import triton
import triton.language as tl

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pass

class ModelNew(torch.nn.Module):
    def forward(self, x, y):
        return x + y
''')
HONEST_CUDA = KernelCode(kernel_type="cuda", metadata={"kernel_name": "add"}, source_code=(
    'extern "C" __global__ void add(const float* a, const float* b, float* c, int n) {\n'
    "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] = a[i] + b[i];\n}\n"))


def kernel(name: str, ms: float, demangled: str | None = None, count: int = 1) -> TracedLaunch:
    return TracedLaunch(kind="kernel", name=name, demangled=demangled, grid=[128, 1, 1],
                        block=[256, 1, 1], stream=7, count=count, device_ms=ms)


def trace(*launches: TracedLaunch, before: MathModes = DEFAULTS,
          after: MathModes | None = None, modes_set: list[str] | None = None,
          dtypes: tuple[str, ...] = ("float32",), **fields: object) -> CallTrace:
    return CallTrace(device="cuda", launches=list(launches), modes_before=before,
                     modes_after=after or before, modes_set=modes_set or [],
                     input_dtypes=list(dtypes), **fields)  # type: ignore[arg-type]


def test_a_torch_cuda_answer_that_only_calls_cublas_is_flagged() -> None:
    found = assemble(trace(kernel(CUBLAS_GEMM, 0.8)), CUBLAS_ONLY_TORCH_CUDA,
                     trace(kernel(CUBLAS_GEMM, 0.8)), REFERENCE, candidate_ms=0.81,
                     reference_ms=0.82)
    block = found.candidate
    assert block is not None and block.observed and block.no_own_kernel_ran
    assert [k.origin.value for k in block.kernels] == ["library"]
    assert block.kernels[0].source == "cuBLAS"
    assert block.own_share == 0.0 and block.own_kernels_defined == []
    assert block.promises_own_code == "it is a 'torch_cuda' answer"
    assert block.reason is not None and "defines none" in block.reason
    assert "1 x cuBLAS (library)" in block.reason
    assert found.integrity_reasons == [f"the candidate {block.reason}"]
    assert found.checks == [PROVENANCE_CHECK, PARITY_CHECK]
    # the reference (plain torch) promises nothing, and is never flagged
    assert found.reference is not None and found.reference.promises_own_code is None
    assert not found.reference.no_own_kernel_ran
    assert block.judged_ms == pytest.approx(0.81)


def test_a_triton_kernel_defined_and_never_launched_is_flagged() -> None:
    found = assemble(trace(kernel("_ZN2at6native29vectorized_elementwise_kernelILi4E", 0.01,
                                  ATEN_ADD)), TRITON_NEVER_LAUNCHED)
    block = found.candidate
    assert block is not None and block.no_own_kernel_ran
    assert block.own_kernels_defined == ["add_kernel"]
    assert block.promises_own_code is not None and "add_kernel" in block.promises_own_code
    assert block.reason is not None and "(add_kernel)" in block.reason and "ATen" in block.reason
    assert block.kernels[0].origin.value == "framework"
    # /evaluate: no reference, so no parity
    assert found.precision_parity is None and found.checks == [PROVENANCE_CHECK]


def test_an_honest_kernel_owns_its_share_of_the_device_time() -> None:
    copy = TracedLaunch(kind="memcpy", name="DtoD", stream=7, bytes=4096, device_ms=0.001)
    found = assemble(trace(kernel("add", 0.003, count=2), copy), HONEST_CUDA)
    block = found.candidate
    assert block is not None and not block.no_own_kernel_ran and block.reason is None
    assert block.kernels[0].origin.value == "own" and block.kernels[0].count == 2
    assert [m.origin.value for m in block.memory_ops] == ["memory"]
    assert block.device_ms == pytest.approx(0.004)
    assert block.own_share == pytest.approx(0.75)
    assert block.device_ms_by_origin == pytest.approx({"own": 0.003, "memory": 0.001})
    assert found.integrity_reasons == []


def test_a_call_that_launched_nothing_breaks_its_promise_too() -> None:
    block = assemble(trace(), HONEST_CUDA).candidate
    assert block is not None and block.no_own_kernel_ran
    assert block.reason is not None and "no kernel ran at all" in block.reason
    assert block.own_share is None  # (no device time to share)


def test_generated_kernels_do_not_keep_a_promise_of_custom_code() -> None:
    inductor = kernel("triton_poi_fused_add_mul_0", 0.01)
    block = assemble(trace(inductor), CUBLAS_ONLY_TORCH_CUDA).candidate
    assert block is not None and block.kernels[0].origin.value == "generated"
    assert block.no_own_kernel_ran
    # while a plain torch answer that torch.compiles promised nothing
    assert not assemble(trace(inductor), REFERENCE).candidate.no_own_kernel_ran  # type: ignore[union-attr]


@pytest.mark.parametrize("fields", [
    {"unobservable": "no GPU: kernel launches are not observable on the CPU"},
    {"call_error": "RuntimeError: boom"},
    {"left_out": 3, "left_out_ms": 0.2},
], ids=["unobservable", "call-error", "left-out"])
def test_no_flag_where_the_trace_cannot_tell(fields: dict) -> None:
    block = assemble(trace(kernel(CUBLAS_GEMM, 0.8), **fields), CUBLAS_ONLY_TORCH_CUDA).candidate
    assert block is not None and not block.no_own_kernel_ran and block.reason is None


def test_what_a_trace_cannot_see_is_said() -> None:
    cpu = CallTrace(device="cpu", unobservable="no GPU: kernel launches are not observable on "
                    "the CPU", modes_before=DEFAULTS, modes_after=DEFAULTS)
    block = assemble(cpu, HONEST_CUDA).candidate
    assert block is not None and not block.observed and block.own_share is None
    assert block.cannot_see == [cpu.unobservable, *ALWAYS_UNSEEN]
    assert block.observed_by == "kernel_process"


def test_tf32_switched_on_during_the_call_is_looser_than_an_fp32_reference() -> None:
    candidate = trace(kernel(TF32_GEMM, 0.3), modes_set=["matmul_tf32=True", "matmul_tf32=False"])
    found = assemble(candidate, REFERENCE, trace(kernel(CUBLAS_GEMM, 0.8)), REFERENCE)
    got = found.precision_parity
    assert got is not None
    assert got.candidate.matmul_tf32 is True and got.reference.matmul_tf32 is False
    assert got.candidate_tf32_kernels == 1 and got.reference_tf32_kernels == 0
    assert len(got.looser) == 2
    assert "TF32 for float32 matmuls" in got.looser[0]
    assert "names say they compute in TF32" in got.looser[1] and TF32_GEMM in got.looser[1]
    assert found.integrity_reasons == [
        "the candidate ran with looser math modes than its reference: " + "; ".join(got.looser)]
    assert found.candidate is not None
    assert found.candidate.math_modes.tf32_kernels == [TF32_GEMM]
    assert found.candidate.math_modes.set_during_call == ["matmul_tf32=True", "matmul_tf32=False"]


def test_tf32_kernels_alone_are_looser_where_the_modes_were_restored_unseen() -> None:
    got = parity(trace(kernel(TF32_GEMM, 0.3)), trace(kernel(CUBLAS_GEMM, 0.8)))
    assert len(got.looser) == 1 and "TF32" in got.looser[0]


def test_tf32_kernels_are_not_looser_than_a_reference_in_bf16() -> None:
    got = parity(trace(kernel(TF32_GEMM, 0.3), dtypes=("bfloat16",)),
                 trace(kernel("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", 0.2),
                       dtypes=("bfloat16",)))
    assert got.looser == []


def test_a_looser_matmul_precision_is_said_once() -> None:
    high = DEFAULTS.model_copy(update={"float32_matmul_precision": "high", "matmul_tf32": True})
    got = parity(trace(before=high), trace())
    assert len(got.looser) == 1
    assert "float32_matmul_precision 'high' where its reference's was 'highest'" in got.looser[0]


@pytest.mark.parametrize(("flag", "words"), [
    ("cudnn_tf32", "cuDNN"),
    ("fp16_reduced_precision_reduction", "fp16 matmuls"),
    ("bf16_reduced_precision_reduction", "bf16 matmuls"),
    ("fp16_accumulation", "fp16 accumulation"),
])
def test_each_looser_flag_is_found(flag: str, words: str) -> None:
    strict = DEFAULTS.model_copy(update={flag: False})
    loose = DEFAULTS.model_copy(update={flag: True})
    got = parity(trace(after=loose, before=strict), trace(before=strict))
    assert len(got.looser) == 1 and words in got.looser[0]


def test_equal_or_stricter_modes_and_unreadable_ones_are_not_flagged() -> None:
    assert parity(trace(), trace()).looser == []
    strict = DEFAULTS.model_copy(update={"cudnn_tf32": False, "matmul_tf32": False})
    assert parity(trace(before=strict), trace()).looser == []  # stricter than its reference
    unknown = MathModes(unreadable={"matmul_tf32": "RuntimeError: mixed APIs"})
    assert parity(trace(before=unknown), trace(before=unknown)).looser == []


def test_the_loosest_modes_of_a_call_count_what_it_set_for_a_while() -> None:
    modes = loosest(trace(modes_set=["float32_matmul_precision=medium",
                                     "float32_matmul_precision=highest", "cudnn_tf32=False"]))
    assert modes.float32_matmul_precision == "medium"
    assert modes.cudnn_tf32 is True  # (on before the call)


def test_the_findings_are_plain_json() -> None:
    found = assemble(trace(kernel("add", 0.003)), HONEST_CUDA, trace(kernel(ATEN_ADD, 0.004)),
                     REFERENCE)
    data = json.loads(json.dumps(found.model_dump(mode="json")))
    kernel_entry = data["candidate"]["kernels"][0]
    assert kernel_entry["origin"] == "own" and kernel_entry["grid"] == [128, 1, 1]
    assert data["reference"]["kernels"][0]["origin"] == "framework"
    assert data["precision_parity"]["looser"] == []
    assert data["candidate"]["math_modes"]["before"]["matmul_tf32"] is False
