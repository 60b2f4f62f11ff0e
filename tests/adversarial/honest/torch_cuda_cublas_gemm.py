"""Honest torch_cuda (GPU): a GEMM through cuBLAS (``cublasSgemm`` on PyTorch's handle and
stream), against ``a @ b``. Legitimate library use must not look like a cheat."""

from tests.adversarial.corpus import Honest, Job, Target, kernel, matmul_compare

SOURCE = '''
import torch
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cublas_v2.h>

torch::Tensor sgemm(torch::Tensor a, torch::Tensor b) {
    const int m = a.size(0), k = a.size(1), n = b.size(1);
    auto c = torch::empty({m, n}, a.options());
    cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
    TORCH_CHECK(cublasSetStream(handle, at::cuda::getCurrentCUDAStream()) == CUBLAS_STATUS_SUCCESS);
    const float alpha = 1.f, beta = 0.f;
    // Row-major C = A B is column-major C^T = B^T A^T.
    auto status = cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha,
                              b.data_ptr<float>(), n, a.data_ptr<float>(), k, &beta,
                              c.data_ptr<float>(), n);
    TORCH_CHECK(status == CUBLAS_STATUS_SUCCESS, "cublasSgemm failed");
    return c;
}
"""
ext = load_inline(name="adversarial_honest_sgemm",
                  cpp_sources="torch::Tensor sgemm(torch::Tensor a, torch::Tensor b);",
                  cuda_sources=cuda_source, functions=["sgemm"], extra_ldflags=["-lcublas"])


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return ext.sgemm(a.contiguous(), b.contiguous())
'''


def build(target: Target) -> Job:
    return matmul_compare(target, kernel("torch_cuda", SOURCE))


CASE = Honest("torch_cuda_cublas_gemm", "torch_cuda", "cublasSgemm on torch's handle", build,
              gpu=True, features=("cublas", "large"))
