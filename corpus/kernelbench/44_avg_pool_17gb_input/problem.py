"""2-d average pooling of a 17.2 GB input (16 x 64 x 2048 x 2048 float32, 11 x 11 windows,
output 142 MB): a problem that fits an 80 GB GPU once with its input and output, not several
times over, so the server must not hold or copy its input per process."""

import torch
import torch.nn as nn

BATCH = 16  # small: 2
CHANNELS = 64  # small: 3
SIDE = 2048  # small: 33
WINDOW = 11  # small: 3


class Model(nn.Module):
    def __init__(self, window: int) -> None:
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size=window)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.rand(BATCH, CHANNELS, SIDE, SIDE)]


def get_init_inputs():
    return [WINDOW]
