"""index_add_ into an input tensor: the reference writes into its argument and returns it.

Indices repeat, so rows receive several contributions.
"""

import torch
import torch.nn as nn

ROWS = 65536  # small: 32
DIM = 256  # small: 8
SOURCES = 262144  # small: 64


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, out: torch.Tensor, index: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        return out.index_add_(0, index, source)


def get_inputs():
    return [torch.randn(ROWS, DIM), torch.randint(0, ROWS, (SOURCES,)), torch.randn(SOURCES, DIM)]


def get_init_inputs():
    return []
