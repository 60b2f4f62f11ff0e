"""BatchNorm2d in training mode; returns the output and the running statistics it updated.

Each call moves the running mean and variance (buffers), so the outputs of successive
correctness trials differ, and a solution must update its buffers as BatchNorm does.
"""

import torch
import torch.nn as nn

BATCH = 32  # small: 4
FEATURES = 64  # small: 8
HEIGHT = 256  # small: 8
WIDTH = 256  # small: 8
MOMENTUM = 0.1


class Model(nn.Module):
    def __init__(self, num_features: int, momentum: float) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features, momentum=momentum)

    def forward(self, x: torch.Tensor):
        y = self.bn(x)
        return y, self.bn.running_mean.clone(), self.bn.running_var.clone()


def get_inputs():
    return [torch.randn(BATCH, FEATURES, HEIGHT, WIDTH) * 2.0 + 0.5]


def get_init_inputs():
    return [FEATURES, MOMENTUM]
