"""Two in-place ops on two inputs: a is clamped from below in place, then b *= a."""

import torch
import torch.nn as nn

ROWS = 8192  # small: 16
COLS = 8192  # small: 64


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor, low: float) -> torch.Tensor:
        a.clamp_(min=low)
        b.mul_(a)
        return b


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randn(ROWS, COLS), -0.25]


def get_init_inputs():
    return []
