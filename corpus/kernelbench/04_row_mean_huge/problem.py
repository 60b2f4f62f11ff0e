"""Mean over the last dimension of a 16384 x 65536 fp32 tensor (4.3 GB in), keepdim."""

import torch
import torch.nn as nn

ROWS = 16384  # small: 32
COLS = 65536  # small: 256


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
