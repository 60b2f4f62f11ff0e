"""Per-channel layer scale; the parameter's shape is a list from get_init_inputs."""

import torch
import torch.nn as nn

BATCH = 32  # small: 2
CHANNELS = 768  # small: 8
LENGTH = 4096  # small: 16


class Model(nn.Module):
    def __init__(self, shape: list) -> None:
        super().__init__()
        self.gamma = nn.Parameter(1.0 + 0.1 * torch.randn(*shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, LENGTH)]


def get_init_inputs():
    return [[CHANNELS, 1]]
