"""SiLU on a float16 tensor (float16 tolerances apply)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 16384  # small: 16
COLS = 16384  # small: 64


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x)


def get_inputs():
    return [torch.randn(ROWS, COLS).half()]


def get_init_inputs():
    return []
