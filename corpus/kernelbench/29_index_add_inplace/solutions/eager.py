"""Out-of-place index_add on a copy."""
# kernel-eval: expected=correct

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, out: torch.Tensor, index: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        return torch.index_add(out, 0, index, source)
