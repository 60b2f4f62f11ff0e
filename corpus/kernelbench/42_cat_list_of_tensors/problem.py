"""torch.cat of a list of tensors passed as one argument; the tensors are made with .cuda()."""

import torch
import torch.nn as nn

ROWS = 4096  # small: 8
COLS = 8192  # small: 16
PARTS = 3


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, tensors: list) -> torch.Tensor:
        return torch.cat(tensors, dim=1)


def get_inputs():
    return [[torch.randn(ROWS, COLS).cuda() for _ in range(PARTS)]]


def get_init_inputs():
    return []
