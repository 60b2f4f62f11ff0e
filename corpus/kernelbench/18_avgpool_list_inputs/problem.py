"""2-d average pooling; kernel size and stride are lists passed by get_inputs."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16  # small: 2
CHANNELS = 64  # small: 3
HEIGHT = 512  # small: 8
WIDTH = 512  # small: 12


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor, kernel_size: list, stride: list) -> torch.Tensor:
        return F.avg_pool2d(x, kernel_size=kernel_size, stride=stride)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH), [2, 2], [2, 2]]


def get_init_inputs():
    return []
