"""Copies each part into its slice of a preallocated output."""
# kernel-eval: expected=correct

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, tensors: list) -> torch.Tensor:
        rows = tensors[0].shape[0]
        widths = [t.shape[1] for t in tensors]
        out = torch.empty(rows, sum(widths), device=tensors[0].device, dtype=tensors[0].dtype)
        start = 0
        for t, width in zip(tensors, widths):
            out[:, start:start + width] = t
            start += width
        return out
