"""torch.gather along the rows with an int64 index tensor; inputs made with .cuda()."""

import torch
import torch.nn as nn

ROWS = 8192  # small: 8
COLS = 8192  # small: 32
PICKS = 1024  # small: 5


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return torch.gather(x, 1, index)


def get_inputs():
    return [torch.randn(ROWS, COLS).cuda(), torch.randint(0, COLS, (ROWS, PICKS)).cuda()]


def get_init_inputs():
    return []
