"""Square fp32 matrix multiplication, 4096 x 4096 x 4096."""
# kernel-eval: atol=1e-3 rtol=1e-3

import torch
import torch.nn as nn

N = 4096  # small: 64


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
