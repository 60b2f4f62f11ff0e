"""Embedding lookup: int64 indices in, rows of a learned table out."""

import torch
import torch.nn as nn

VOCAB = 32000  # small: 50
DIM = 1024  # small: 16
BATCH = 32  # small: 2
SEQ = 1024  # small: 8


class Model(nn.Module):
    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(num_embeddings, embedding_dim)

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        return self.embedding(indices)


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, SEQ))]


def get_init_inputs():
    return [VOCAB, DIM]
