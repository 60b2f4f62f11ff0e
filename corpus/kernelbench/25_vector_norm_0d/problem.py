"""The Euclidean norm of a whole tensor: a 0-d output."""

import torch
import torch.nn as nn

ROWS = 16384  # small: 16
COLS = 16384  # small: 64


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.vector_norm(x)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
