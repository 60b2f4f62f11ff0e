"""Conv2d with an asymmetric kernel; kernel size, stride, padding: tuples from get_init_inputs."""
# kernel-eval: atol=1e-2 rtol=1e-2

import torch
import torch.nn as nn

BATCH = 16  # small: 2
IN_CHANNELS = 3
OUT_CHANNELS = 64  # small: 4
HEIGHT = 256  # small: 12
WIDTH = 256  # small: 16
KERNEL_SIZE = (3, 5)
STRIDE = (1, 2)
PADDING = (1, 2)


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: tuple,
                 stride: tuple, padding: tuple) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride,
                              padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, KERNEL_SIZE, STRIDE, PADDING]
