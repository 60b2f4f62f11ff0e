"""Honest multi_kernel: an entry point that returns its answer instead of filling a buffer."""

from tests.adversarial.corpus import Honest, Job, Target, compare, io, kernel, tensor, torch_kernel

REF = """
class Model(torch.nn.Module):
    def forward(self, x):
        return F.leaky_relu(x, 0.1)
"""
SOURCE = """
import torch


def leaky(x):
    return torch.where(x > 0, x, 0.1 * x)
"""


def build(target: Target) -> Job:
    c = io(tensor("x", [128, 128], 35))
    return compare(torch_kernel(REF, c), kernel("multi_kernel", SOURCE, c, entry_point="leaky"))


CASE = Honest("multi_returns_value", "multi_kernel", "returns a tensor", build)
