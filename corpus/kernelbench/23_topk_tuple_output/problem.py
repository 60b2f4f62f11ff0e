"""torch.topk: a tuple output of values (float) and indices (int64); k from get_init_inputs."""

import torch
import torch.nn as nn

ROWS = 4096  # small: 8
COLS = 32768  # small: 128
K = 64  # small: 8


class Model(nn.Module):
    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor):
        return torch.topk(x, self.k, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [K]
