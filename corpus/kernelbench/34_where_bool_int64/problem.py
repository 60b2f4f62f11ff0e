"""Integer select: where(cond, 3x + offset, -x) on int64 tensors, cond a bool tensor."""

import torch
import torch.nn as nn

ROWS = 8192  # small: 8
COLS = 8192  # small: 32
OFFSET = 7


class Model(nn.Module):
    def __init__(self, offset: int) -> None:
        super().__init__()
        self.offset = offset

    def forward(self, cond: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.where(cond, x * 3 + self.offset, -x)


def get_inputs():
    cond = torch.rand(ROWS, COLS) < 0.5
    x = torch.randint(-(2**40), 2**40, (ROWS, COLS), dtype=torch.int64)
    return [cond, x]


def get_init_inputs():
    return [OFFSET]
