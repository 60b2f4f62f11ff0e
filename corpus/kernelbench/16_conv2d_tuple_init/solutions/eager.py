"""F.conv2d with the module's weight and bias."""
# kernel-eval: expected=correct

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: tuple,
                 stride: tuple, padding: tuple) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride,
                              padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv = self.conv
        return F.conv2d(x, conv.weight, conv.bias, stride=conv.stride, padding=conv.padding)
