"""Honest torch_cuda (GPU): a tiny load_inline ReLU (256 elements): launch-bound timing."""

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

REF = model("torch.relu(x)")
SOURCE = '''
import torch
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>
__global__ void relu_kernel(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu(torch::Tensor x) {
    auto out = torch::empty_like(x);
    int n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""
ext = load_inline(name="adversarial_honest_relu",
                  cpp_sources="torch::Tensor relu(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["relu"])


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.relu(x)
'''


def build(target: Target) -> Job:
    return compare(torch_kernel(REF, io(tensor("x", [256], 54))), kernel("torch_cuda", SOURCE))


CASE = Honest("torch_cuda_relu_small", "torch_cuda", "tiny load_inline relu", build, gpu=True,
              features=("small",))
