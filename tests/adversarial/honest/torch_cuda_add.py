"""Honest torch_cuda (GPU): KernelBench ModelNew with a load_inline elementwise add."""

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

REF = model("x + y", "x, y")
SOURCE = '''
import torch
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>
__global__ void add_kernel(const float* a, const float* b, float* out, int size) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < size) out[i] = a[i] + b[i];
}
torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    int size = a.numel();
    add_kernel<<<(size + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                            out.data_ptr<float>(), size);
    return out;
}
"""
ext = load_inline(name="adversarial_honest_add",
                  cpp_sources="torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b);",
                  cuda_sources=cuda_source, functions=["add_cuda"])


class ModelNew(torch.nn.Module):
    def forward(self, x, y):
        return ext.add_cuda(x, y)
'''


def build(target: Target) -> Job:
    c = io(tensor("x", [1 << 20], 51), tensor("y", [1 << 20], 52))
    return compare(torch_kernel(REF, c), kernel("torch_cuda", SOURCE))


CASE = Honest("torch_cuda_add", "torch_cuda", "load_inline vector add", build, gpu=True)
