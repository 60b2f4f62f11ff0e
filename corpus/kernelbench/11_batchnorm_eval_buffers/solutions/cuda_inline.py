"""Eval-mode batch norm folded into one scale and shift per channel, applied by a CUDA kernel."""
# kernel-eval: kernel_type=torch_cuda expected=correct

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

__global__ void channel_affine_kernel(const float* __restrict__ x, const float* __restrict__ scale,
                                      const float* __restrict__ shift, float* __restrict__ out,
                                      int64_t n, int64_t plane, int64_t channels) {
    int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t c = (i / plane) % channels;
        out[i] = x[i] * scale[c] + shift[c];
    }
}

torch::Tensor channel_affine_cuda(torch::Tensor x, torch::Tensor scale, torch::Tensor shift) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 4, "expected a 4-d CUDA tensor");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    int64_t n = xc.numel();
    if (n == 0) return out;
    int64_t plane = xc.size(2) * xc.size(3);
    const int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535 * 16) blocks = 65535 * 16;
    channel_affine_kernel<<<(unsigned int)blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), scale.contiguous().data_ptr<float>(),
        shift.contiguous().data_ptr<float>(), out.data_ptr<float>(), n, plane, xc.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = (
    "torch::Tensor channel_affine_cuda(torch::Tensor x, torch::Tensor scale, torch::Tensor shift);"
)

channel_affine_ext = load_inline(
    name="corpus_channel_affine",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["channel_affine_cuda"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, num_features: int) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.normal_(1.0, 0.1)
            self.bn.bias.normal_(0.0, 0.1)
        self.bn.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bn = self.bn
        scale = bn.weight * torch.rsqrt(bn.running_var + bn.eps)
        shift = bn.bias - bn.running_mean * scale
        return channel_affine_ext.channel_affine_cuda(x, scale, shift)
