"""Wrong: the mean is taken over dim 0; the matrix is square, so only the values give it away."""
# kernel-eval: expected=incorrect

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor):
        low, high = torch.aminmax(x, dim=1)
        return low, high, x.mean(dim=0)
