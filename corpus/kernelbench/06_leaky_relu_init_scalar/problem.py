"""Leaky ReLU whose slope is a Python float from get_init_inputs; inputs made with .cuda()."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 8192  # small: 8
DIM = 32768  # small: 128
NEGATIVE_SLOPE = 0.01


class Model(nn.Module):
    def __init__(self, negative_slope: float) -> None:
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, negative_slope=self.negative_slope)


def get_inputs():
    return [torch.randn(BATCH, DIM).cuda()]


def get_init_inputs():
    return [NEGATIVE_SLOPE]
