"""Honest torch: a float32 matmul written as einsum (cuBLAS on a GPU, 2048² there)."""

from tests.adversarial.corpus import Honest, Job, Target, matmul_compare, torch_kernel

CUSTOM = """
class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return torch.einsum("ik,kj->ij", a, b)
"""


def build(target: Target) -> Job:
    return matmul_compare(target, torch_kernel(CUSTOM))


CASE = Honest("torch_matmul_einsum", "torch", "matmul via einsum", build,
              features=("large", "cublas"))
