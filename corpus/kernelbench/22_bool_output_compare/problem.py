"""A bool output: (x > y) & (|x| < threshold), the threshold an int from get_init_inputs."""

import torch
import torch.nn as nn

ROWS = 8192  # small: 16
COLS = 8192  # small: 64
THRESHOLD = 2


class Model(nn.Module):
    def __init__(self, threshold: int) -> None:
        super().__init__()
        self.threshold = threshold

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x > y) & (x.abs() < self.threshold)


def get_inputs():
    return [torch.randn(ROWS, COLS) * 3.0, torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [THRESHOLD]
