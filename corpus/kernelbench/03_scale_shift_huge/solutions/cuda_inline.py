"""x * alpha + beta in a load_inline CUDA kernel taking the two scalars as float arguments."""
# kernel-eval: kernel_type=torch_cuda expected=correct

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

__global__ void scale_shift_kernel(const float4* __restrict__ x, float4* __restrict__ out,
                                   int64_t n4, float alpha, float beta) {
    int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 v = x[i];
        v.x = v.x * alpha + beta;
        v.y = v.y * alpha + beta;
        v.z = v.z * alpha + beta;
        v.w = v.w * alpha + beta;
        out[i] = v;
    }
}

__global__ void scale_shift_tail(const float* __restrict__ x, float* __restrict__ out,
                                 int64_t start, int64_t n, float alpha, float beta) {
    int64_t i = start + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] * alpha + beta;
}

torch::Tensor scale_shift_cuda(torch::Tensor x, double alpha, double beta) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32,
                "expected a float32 CUDA tensor");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    int64_t n = xc.numel();
    int64_t n4 = n / 4;
    auto stream = c10::cuda::getCurrentCUDAStream();
    const int threads = 256;
    if (n4 > 0) {
        int64_t blocks = (n4 + threads - 1) / threads;
        if (blocks > 65535 * 16) blocks = 65535 * 16;
        scale_shift_kernel<<<(unsigned int)blocks, threads, 0, stream>>>(
            reinterpret_cast<const float4*>(xc.data_ptr<float>()),
            reinterpret_cast<float4*>(out.data_ptr<float>()), n4, (float)alpha, (float)beta);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    if (n > n4 * 4) {
        scale_shift_tail<<<1, threads, 0, stream>>>(
            xc.data_ptr<float>(), out.data_ptr<float>(), n4 * 4, n, (float)alpha, (float)beta);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return out;
}
"""

cpp_source = "torch::Tensor scale_shift_cuda(torch::Tensor x, double alpha, double beta);"

scale_shift_ext = load_inline(
    name="corpus_scale_shift",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["scale_shift_cuda"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
        return scale_shift_ext.scale_shift_cuda(x, alpha, beta)
