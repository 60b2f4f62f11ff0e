"""Batched matrix multiplication."""
# kernel-eval: atol=1e-3 rtol=1e-3

import torch
import torch.nn as nn

BATCH = 128  # small: 2
M = 512  # small: 16
K = 1024  # small: 32
N = 2048  # small: 24


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B)


def get_inputs():
    return [torch.randn(BATCH, M, K), torch.randn(BATCH, K, N)]


def get_init_inputs():
    return []
