"""int32 arithmetic: (a * b + 7) mod m, with m a Python int from get_inputs."""

import torch
import torch.nn as nn

ROWS = 8192  # small: 8
COLS = 8192  # small: 16


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor, modulus: int) -> torch.Tensor:
        return (a * b + 7) % modulus


def get_inputs():
    a = torch.randint(-1000, 1000, (ROWS, COLS), dtype=torch.int32)
    b = torch.randint(-1000, 1000, (ROWS, COLS), dtype=torch.int32)
    return [a, b, 97]


def get_init_inputs():
    return []
