"""masked_fill with a bool mask tensor and a Python float fill value; inputs made with .cuda()."""

import torch
import torch.nn as nn

BATCH = 64  # small: 2
SEQ = 1024  # small: 16


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, scores: torch.Tensor, mask: torch.Tensor, value: float) -> torch.Tensor:
        return scores.masked_fill(mask, value)


def get_inputs():
    scores = torch.randn(BATCH, SEQ, SEQ).cuda()
    mask = (torch.rand(BATCH, SEQ, SEQ) < 0.3).cuda()
    return [scores, mask, -1e4]


def get_init_inputs():
    return []
