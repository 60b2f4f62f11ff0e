"""Honest torch: a numerically stable softmax spelt out (max, exp, sum, divide)."""

from tests.adversarial.corpus import Honest, Job, Target, compare, io, model, tensor, torch_kernel

REF = model("torch.softmax(x, dim=-1)")
CUSTOM = """
class ModelNew(torch.nn.Module):
    def forward(self, x):
        e = (x - x.amax(dim=-1, keepdim=True)).exp()
        return e / e.sum(dim=-1, keepdim=True)
"""


def build(target: Target) -> Job:
    return compare(torch_kernel(REF, io(tensor("x", [64, 512], 3))), torch_kernel(CUSTOM))


CASE = Honest("torch_softmax_manual", "torch", "stable softmax by hand", build)
