"""(A @ B) transposed: the reference returns a non-contiguous view."""
# kernel-eval: atol=1e-3 rtol=1e-3

import torch
import torch.nn as nn

M = 2048  # small: 32
K = 4096  # small: 64
N = 1024  # small: 48


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B).t()


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
