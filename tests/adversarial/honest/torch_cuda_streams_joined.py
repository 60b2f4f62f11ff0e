"""Honest torch_cuda (GPU): C++ forks half the work to a second stream and joins it with an
event before returning, the legitimate pattern the side-stream cheats abuse."""

from tests.adversarial.corpus import (
    Honest,
    Job,
    Target,
    compare,
    io,
    kernel,
    model,
    tensor,
    torch_kernel,
)

N = 1 << 22
REF = model("x * x + 1")
SOURCE = '''
import torch
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

__global__ void square_plus_one(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] * x[i] + 1.f;
}

torch::Tensor forked(torch::Tensor x) {
    auto out = torch::empty_like(x);
    const int n = x.numel(), half = n / 2;
    cudaStream_t current = at::cuda::getCurrentCUDAStream();
    static cudaStream_t side = nullptr;
    if (side == nullptr) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    cudaEvent_t fork, join;
    cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
    cudaEventCreateWithFlags(&join, cudaEventDisableTiming);
    cudaEventRecord(fork, current);
    cudaStreamWaitEvent(side, fork, 0);
    square_plus_one<<<(n - half + 255) / 256, 256, 0, side>>>(
        x.data_ptr<float>() + half, out.data_ptr<float>() + half, n - half);
    square_plus_one<<<(half + 255) / 256, 256, 0, current>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), half);
    cudaEventRecord(join, side);
    cudaStreamWaitEvent(current, join, 0);  // joined: the caller's stream waits for both halves
    cudaEventDestroy(fork);
    cudaEventDestroy(join);
    return out;
}
"""
ext = load_inline(name="adversarial_honest_forked",
                  cpp_sources="torch::Tensor forked(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["forked"])


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.forked(x)
'''


def build(target: Target) -> Job:
    return compare(torch_kernel(REF, io(tensor("x", [N], 53))), kernel("torch_cuda", SOURCE),
                   trials=20)


CASE = Honest("torch_cuda_streams_joined", "torch_cuda", "C++ fork/join over two streams",
              build, gpu=True, features=("streams", "large"))
