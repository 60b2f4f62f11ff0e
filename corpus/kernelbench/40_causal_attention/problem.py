"""Causal scaled dot-product attention; q, k and v made with .cuda()."""
# kernel-eval: atol=1e-3 rtol=1e-3

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 32  # small: 2
HEADS = 16  # small: 2
SEQ = 512  # small: 16
HEAD_DIM = 64  # small: 8


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def get_inputs():
    shape = (BATCH, HEADS, SEQ, HEAD_DIM)
    return [torch.randn(shape).cuda(), torch.randn(shape).cuda(), torch.randn(shape).cuda()]


def get_init_inputs():
    return []
