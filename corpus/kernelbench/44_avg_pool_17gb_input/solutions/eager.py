"""The same pooling through torch.nn.functional: correct, and as fast as the reference."""
# kernel-eval: expected=correct

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, window: int) -> None:
        super().__init__()
        self.window = window

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(x, self.window)
