"""Non-overlapping windows as a reshape and a mean (kernel size equals stride here)."""
# kernel-eval: expected=correct

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor, kernel_size: list, stride: list) -> torch.Tensor:
        kh, kw = kernel_size
        assert list(stride) == [kh, kw], "this solution handles kernel_size == stride only"
        b, c, h, w = x.shape
        x = x[:, :, : h // kh * kh, : w // kw * kw]
        return x.reshape(b, c, h // kh, kh, w // kw, kw).mean(dim=(3, 5))
