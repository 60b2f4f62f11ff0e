"""logical_and of the two comparisons."""
# kernel-eval: expected=correct

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, threshold: int) -> None:
        super().__init__()
        self.threshold = threshold

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.logical_and(torch.gt(x, y), torch.lt(torch.abs(x), self.threshold))
