"""Timing: a load_inline extension launches on a cudaStream_t of its own making.

Tries: the same trick as ``side_stream`` but invisible from Python: the C++ code creates a
non-blocking stream, makes it wait for the inputs, launches there and returns at once. The
honest twin is the same extension launching on PyTorch's current stream, so both figures
time the same naive kernel.
Caught by: CUPTI activity on all streams, or a device-synchronised host interval.
"""

from tests.adversarial.corpus import Cheat, Family, Job, Target, kernel, matmul_compare

CUDA_SOURCE = r'''
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

__global__ void naive_matmul(const float* a, const float* b, float* c, int n) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < n && col < n) {
        float acc = 0.f;
        for (int k = 0; k < n; ++k) acc += a[row * n + k] * b[k * n + col];
        c[row * n + col] = acc;
    }
}

static torch::Tensor launch(torch::Tensor a, torch::Tensor b, cudaStream_t stream) {
    int n = a.size(0);
    auto c = torch::empty_like(a);
    dim3 block(16, 16), grid((n + 15) / 16, (n + 15) / 16);
    naive_matmul<<<grid, block, 0, stream>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                             c.data_ptr<float>(), n);
    return c;
}

torch::Tensor matmul_current(torch::Tensor a, torch::Tensor b) {
    return launch(a, b, at::cuda::getCurrentCUDAStream());
}

torch::Tensor matmul_side(torch::Tensor a, torch::Tensor b) {
    static cudaStream_t side = nullptr;
    if (side == nullptr) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    cudaEvent_t ready;
    cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
    cudaEventRecord(ready, at::cuda::getCurrentCUDAStream());
    cudaStreamWaitEvent(side, ready, 0);
    cudaEventDestroy(ready);
    return launch(a, b, side);  // not joined: the current stream does not wait for it
}
'''

TEMPLATE = '''
import torch
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""@CUDA@"""
ext = load_inline(
    name="adversarial_side_stream",
    cpp_sources="torch::Tensor matmul_current(torch::Tensor a, torch::Tensor b);\\n"
                "torch::Tensor matmul_side(torch::Tensor a, torch::Tensor b);",
    cuda_sources=CUDA_SOURCE,
    functions=["matmul_current", "matmul_side"],
)


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return ext.@FUNCTION@(a.contiguous(), b.contiguous())
'''


def source(function: str) -> str:
    return TEMPLATE.replace("@CUDA@", CUDA_SOURCE).replace("@FUNCTION@", function)


def build(target: Target) -> Job:
    return matmul_compare(target, kernel("torch_cuda", source("matmul_side")))


def honest(target: Target) -> Job:
    return matmul_compare(target, kernel("torch_cuda", source("matmul_current")))


CASE = Cheat(
    name="side_stream_cpp",
    family=Family.TIMING,
    technique="side_stream",
    tries="C++ (load_inline) creates its own non-blocking cudaStream_t and never joins it",
    caught_by="timing cross-check over all streams (CUPTI) or a device-synchronised interval",
    build=build,
    honest=honest,
    gpu=True,
)
