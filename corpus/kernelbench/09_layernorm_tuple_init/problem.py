"""LayerNorm over the last three dimensions; normalized_shape is a tuple from get_init_inputs."""

import torch
import torch.nn as nn

BATCH = 16  # small: 2
FEATURES = 64  # small: 4
DIM1 = 256  # small: 8
DIM2 = 256  # small: 8


class Model(nn.Module):
    def __init__(self, normalized_shape: tuple) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs():
    return [torch.randn(BATCH, FEATURES, DIM1, DIM2)]


def get_init_inputs():
    return [(FEATURES, DIM1, DIM2)]
