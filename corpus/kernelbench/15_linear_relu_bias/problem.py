"""Linear layer with bias, then ReLU."""
# kernel-eval: atol=1e-3 rtol=1e-3

import torch
import torch.nn as nn

BATCH = 1024  # small: 8
IN_FEATURES = 8192  # small: 64
OUT_FEATURES = 8192  # small: 32


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
