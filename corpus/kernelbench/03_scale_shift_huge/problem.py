"""x * alpha + beta over a 65536 x 16384 fp32 tensor (4.3 GB in), alpha and beta Python floats."""

import torch
import torch.nn as nn

ROWS = 65536  # small: 64
COLS = 16384  # small: 64


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
        return x * alpha + beta


def get_inputs():
    return [torch.randn(ROWS, COLS), 1.5, -0.25]


def get_init_inputs():
    return []
