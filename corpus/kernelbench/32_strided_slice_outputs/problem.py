"""Two non-contiguous outputs: every second column of 3x, and 3x transposed."""

import torch
import torch.nn as nn

ROWS = 8192  # small: 16
COLS = 8192  # small: 32


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor):
        y = x * 3.0
        return y[:, ::2], y.t()


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
