"""Blend with the condition as 0/1 integers."""
# kernel-eval: expected=correct

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, offset: int) -> None:
        super().__init__()
        self.offset = offset

    def forward(self, cond: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        c = cond.to(torch.int64)
        return c * (x * 3 + self.offset) + (1 - c) * (-x)
