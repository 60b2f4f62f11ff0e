"""BatchNorm2d in eval mode with non-trivial running statistics (buffers) and affine parameters."""

import torch
import torch.nn as nn

BATCH = 32  # small: 2
FEATURES = 128  # small: 4
HEIGHT = 128  # small: 8
WIDTH = 128  # small: 8


class Model(nn.Module):
    def __init__(self, num_features: int) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.normal_(1.0, 0.1)
            self.bn.bias.normal_(0.0, 0.1)
        self.bn.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(x)


def get_inputs():
    return [torch.randn(BATCH, FEATURES, HEIGHT, WIDTH)]


def get_init_inputs():
    return [FEATURES]
