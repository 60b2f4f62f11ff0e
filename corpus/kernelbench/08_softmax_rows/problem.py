"""Softmax over the rows of a 4096 x 65536 fp32 tensor."""

import torch
import torch.nn as nn

BATCH = 4096  # small: 8
DIM = 65536  # small: 128


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
