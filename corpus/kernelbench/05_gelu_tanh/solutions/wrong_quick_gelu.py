"""Wrong: the sigmoid ("quick") GELU, x * sigmoid(1.702 x), is not the tanh approximation."""
# kernel-eval: expected=incorrect

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)
