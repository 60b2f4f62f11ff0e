"""ConvTranspose2d whose kernel size is a list from get_init_inputs."""
# kernel-eval: atol=1e-2 rtol=1e-2

import torch
import torch.nn as nn

BATCH = 8  # small: 2
IN_CHANNELS = 64  # small: 4
OUT_CHANNELS = 32  # small: 3
HEIGHT = 128  # small: 8
WIDTH = 128  # small: 8


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: list, stride: int,
                 padding: int, output_padding: int) -> None:
        super().__init__()
        self.deconv = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                         padding=padding, output_padding=output_padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.deconv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, [3, 3], 2, 1, 1]
