"""Eval-mode batch norm from the buffers: (x - mean) / sqrt(var + eps) * weight + bias."""
# kernel-eval: expected=correct

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, num_features: int) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.normal_(1.0, 0.1)
            self.bn.bias.normal_(0.0, 0.1)
        self.bn.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bn = self.bn
        shape = (1, -1, 1, 1)
        scale = (bn.weight * torch.rsqrt(bn.running_var + bn.eps)).view(shape)
        return (x - bn.running_mean.view(shape)) * scale + bn.bias.view(shape)
