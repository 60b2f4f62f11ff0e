"""Wrong: index_copy overwrites rows instead of accumulating into them."""
# kernel-eval: expected=incorrect

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, out: torch.Tensor, index: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        return out.clone().index_copy_(0, index, source)
