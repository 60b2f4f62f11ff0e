"""tanh, then a permutation given as a tuple by get_inputs: a non-contiguous output."""

import torch
import torch.nn as nn

BATCH = 64  # small: 2
CHANNELS = 512  # small: 8
LENGTH = 4096  # small: 16


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor, dims: tuple) -> torch.Tensor:
        return torch.tanh(x).permute(*dims)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, LENGTH), (0, 2, 1)]


def get_init_inputs():
    return []
