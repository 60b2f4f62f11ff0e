"""A SwiGLU feed-forward block: down(silu(gate(x)) * up(x)), three bias-free linear layers."""
# kernel-eval: atol=1e-3 rtol=1e-3

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 4096  # small: 8
HIDDEN = 4096  # small: 32
INTERMEDIATE = 11008  # small: 48


class Model(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate = nn.Linear(hidden, intermediate, bias=False)
        self.up = nn.Linear(hidden, intermediate, bias=False)
        self.down = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, INTERMEDIATE]
