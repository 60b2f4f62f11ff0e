"""Honest multi_kernel: an entry point of torch ops that fills its declared output."""

from tests.adversarial.corpus import (
    Honest,
    Job,
    Target,
    compare,
    io,
    kernel,
    model,
    output,
    tensor,
    torch_kernel,
)

N = 4096
REF = model("torch.tanh(x) * y", "x, y")
SOURCE = """
import torch


def run(x, y, out):
    torch.mul(torch.tanh(x), y, out=out)
"""


def build(target: Target) -> Job:
    c = io(tensor("x", [N], 31), tensor("y", [N], 32), output("out", [N]))
    return compare(torch_kernel(REF, c), kernel("multi_kernel", SOURCE, c, entry_point="run"))


CASE = Honest("multi_torch_ops", "multi_kernel", "torch ops into an output buffer", build)
