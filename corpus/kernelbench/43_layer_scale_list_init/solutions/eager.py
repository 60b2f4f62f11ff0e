"""torch.mul against the parameter expanded to the input's shape."""
# kernel-eval: expected=correct

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, shape: list) -> None:
        super().__init__()
        self.gamma = nn.Parameter(1.0 + 0.1 * torch.randn(*shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mul(x, self.gamma.expand_as(x))
