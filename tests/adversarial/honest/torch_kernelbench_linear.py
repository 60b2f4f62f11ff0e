"""Honest torch: KernelBench format without an IOContract (``get_inputs``/``get_init_inputs``):
Linear + ReLU rewritten as ``addmm`` + ``clamp_min`` on the same weights."""

from tests.adversarial.corpus import Honest, Job, Target, compare, torch_kernel

REF = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(128, 512).cuda()]


def get_init_inputs():
    return [512, 256]
"""
CUSTOM = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.addmm(self.linear.bias, x, self.linear.weight.t()).clamp_min(0)
"""


def build(target: Target) -> Job:
    return compare(torch_kernel(REF), torch_kernel(CUSTOM))


CASE = Honest("torch_kernelbench_linear", "torch", "KernelBench Linear+ReLU via addmm", build)
