"""A bias-free linear map scaled per output by a registered buffer (a non-parameter state)."""
# kernel-eval: atol=1e-3 rtol=1e-3

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 2048  # small: 4
IN_FEATURES = 4096  # small: 32
OUT_FEATURES = 4096  # small: 16


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) * 0.02)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight) * self.scale


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
