"""The same suffix sums through torch.flip on the last dimension."""
# kernel-eval: expected=correct

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flip(torch.flip(x, dims=[-1]).cumsum(dim=-1), dims=[-1])
