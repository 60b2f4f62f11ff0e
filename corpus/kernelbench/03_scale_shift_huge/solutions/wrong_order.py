"""Wrong: shifts before scaling, (x + beta) * alpha."""
# kernel-eval: expected=incorrect

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
        return (x + beta) * alpha
