"""Honest torch: ReLU as ``clamp_min(0)`` on a small vector (1024 elements)."""

from tests.adversarial.corpus import Honest, Job, Target, compare, io, model, tensor, torch_kernel

REF = model("torch.relu(x)")
CUSTOM = model("x.clamp_min(0)", cls="ModelNew")


def build(target: Target) -> Job:
    return compare(torch_kernel(REF, io(tensor("x", [1024], 1))), torch_kernel(CUSTOM))


CASE = Honest("torch_relu_clamp", "torch", "relu as clamp_min", build, features=("small",))
