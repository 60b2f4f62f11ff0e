"""The same two outputs, each computed into its own contiguous tensor."""
# kernel-eval: expected=correct

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor):
        return x[:, ::2] * 3.0, x.t().contiguous() * 3.0
