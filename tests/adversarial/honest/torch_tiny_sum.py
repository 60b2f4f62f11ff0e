"""Honest torch: the smallest case, a 0-d sum of eight numbers."""

from tests.adversarial.corpus import Honest, Job, Target, compare, io, model, tensor, torch_kernel

REF = model("x.sum()")
CUSTOM = model("torch.sum(x)", cls="ModelNew")


def build(target: Target) -> Job:
    return compare(torch_kernel(REF, io(tensor("x", [8], 16))), torch_kernel(CUSTOM))


CASE = Honest("torch_tiny_sum", "torch", "0-d sum of 8 elements", build, features=("small",))
