"""F.conv_transpose2d with the module's parameters."""
# kernel-eval: expected=correct

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: list, stride: int,
                 padding: int, output_padding: int) -> None:
        super().__init__()
        self.deconv = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                         padding=padding, output_padding=output_padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = self.deconv
        return F.conv_transpose2d(x, d.weight, d.bias, stride=d.stride, padding=d.padding,
                                  output_padding=d.output_padding)
