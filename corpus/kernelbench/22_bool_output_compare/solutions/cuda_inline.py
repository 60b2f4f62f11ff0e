"""The predicate in a CUDA kernel writing a bool tensor."""
# kernel-eval: kernel_type=torch_cuda expected=correct

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

__global__ void band_kernel(const float* __restrict__ x, const float* __restrict__ y,
                            bool* __restrict__ out, int64_t n, float threshold) {
    int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float xi = x[i];
        out[i] = (xi > y[i]) && (fabsf(xi) < threshold);
    }
}

torch::Tensor band_cuda(torch::Tensor x, torch::Tensor y, int64_t threshold) {
    TORCH_CHECK(x.is_cuda() && y.is_cuda() && x.sizes() == y.sizes(),
                "expected two CUDA tensors of one shape");
    auto xc = x.contiguous();
    auto yc = y.contiguous();
    auto out = torch::empty(xc.sizes(), xc.options().dtype(torch::kBool));
    int64_t n = xc.numel();
    if (n == 0) return out;
    const int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535 * 16) blocks = 65535 * 16;
    band_kernel<<<(unsigned int)blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), yc.data_ptr<float>(), out.data_ptr<bool>(), n, (float)threshold);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = "torch::Tensor band_cuda(torch::Tensor x, torch::Tensor y, int64_t threshold);"

band_ext = load_inline(
    name="corpus_bool_band",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["band_cuda"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, threshold: int) -> None:
        super().__init__()
        self.threshold = threshold

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return band_ext.band_cuda(x, y, self.threshold)
