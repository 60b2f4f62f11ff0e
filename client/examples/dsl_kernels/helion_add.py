"""Helion (PyTorch's tile DSL, compiled through Triton): ``a + b``.

The kernel names its config, so a job compiles it once and never autotunes (Helion's
autotuner takes minutes).
"""

SOURCE = '''
import torch
import helion
import helion.language as hl


@helion.kernel(config=helion.Config(block_sizes=[1024]))
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(out.size()):
        out[tile] = x[tile] OP y[tile]
    return out


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return add(a, b)
'''

CORRECT = SOURCE.replace("OP", "+")
WRONG = SOURCE.replace("OP", "-")
