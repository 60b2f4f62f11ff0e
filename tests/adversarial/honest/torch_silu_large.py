"""Honest torch: SiLU as ``x * sigmoid(x)`` on a large vector (1M elements; 16M on a GPU)."""

from tests.adversarial.corpus import Honest, Job, Target, compare, io, model, tensor, torch_kernel

REF = model("F.silu(x)")
CUSTOM = model("x * torch.sigmoid(x)", cls="ModelNew")


def build(target: Target) -> Job:
    n = 1 << (24 if target.gpu else 20)
    return compare(torch_kernel(REF, io(tensor("x", [n], 9))), torch_kernel(CUSTOM))


CASE = Honest("torch_silu_large", "torch", "silu on a large vector", build, features=("large",))
