"""Argmax over the rows: an int64 output, compared exactly."""

import torch
import torch.nn as nn

ROWS = 4096  # small: 8
COLS = 16384  # small: 100


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
