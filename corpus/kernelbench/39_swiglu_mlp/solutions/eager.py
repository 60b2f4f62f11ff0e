"""Gate and up projections fused into one matmul on the concatenated weights."""
# kernel-eval: expected=correct

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate = nn.Linear(hidden, intermediate, bias=False)
        self.up = nn.Linear(hidden, intermediate, bias=False)
        self.down = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fused = torch.cat([self.gate.weight, self.up.weight], dim=0)
        gate, up = (x @ fused.t()).chunk(2, dim=-1)
        return (F.silu(gate) * up) @ self.down.weight.t()
