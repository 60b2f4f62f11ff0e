"""Sigmoid over a 4096 x 393216 fp32 tensor: 6.4 GB in, 6.4 GB out at full size."""

import torch
import torch.nn as nn

BATCH = 4096  # small: 16
DIM = 393216  # small: 96


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
