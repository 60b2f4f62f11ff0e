"""Row argmax in CUDA: one block per row, a shared-memory (value, index) tree reduction."""
# kernel-eval: kernel_type=torch_cuda expected=correct

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

constexpr int THREADS = 256;

__global__ void argmax_rows_kernel(const float* __restrict__ x, int64_t* __restrict__ out,
                                   int64_t cols) {
    const float* row = x + (int64_t)blockIdx.x * cols;
    float best = -INFINITY;
    int64_t best_index = cols;  // "none yet"; any real index is smaller
    for (int64_t c = threadIdx.x; c < cols; c += THREADS) {
        float v = row[c];
        if (best_index == cols || v > best) {  // c grows, so ties keep the first index
            best = v;
            best_index = c;
        }
    }
    __shared__ float values[THREADS];
    __shared__ int64_t indices[THREADS];
    values[threadIdx.x] = best;
    indices[threadIdx.x] = best_index;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float v = values[threadIdx.x + s];
            int64_t i = indices[threadIdx.x + s];
            bool take = i < cols && (indices[threadIdx.x] == cols || v > values[threadIdx.x] ||
                                     (v == values[threadIdx.x] && i < indices[threadIdx.x]));
            if (take) {
                values[threadIdx.x] = v;
                indices[threadIdx.x] = i;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = indices[0];
}

torch::Tensor argmax_rows_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.scalar_type() == torch::kFloat32,
                "expected a 2-d float32 CUDA tensor");
    auto xc = x.contiguous();
    auto out = torch::empty({xc.size(0)}, xc.options().dtype(torch::kInt64));
    if (xc.size(0) == 0) return out;
    argmax_rows_kernel<<<(unsigned int)xc.size(0), THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), out.data_ptr<int64_t>(), xc.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = "torch::Tensor argmax_rows_cuda(torch::Tensor x);"

argmax_ext = load_inline(
    name="corpus_argmax_rows",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["argmax_rows_cuda"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return argmax_ext.argmax_rows_cuda(x)
