"""Sigmoid spelled out as 1 / (1 + exp(-x))."""
# kernel-eval: expected=correct

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.reciprocal(1.0 + torch.exp(-x))
