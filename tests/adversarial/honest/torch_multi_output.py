"""Honest torch: two outputs (max values and their int64 indices), against ``torch.max``."""

from tests.adversarial.corpus import Honest, Job, Target, compare, io, model, tensor, torch_kernel

REF = model("torch.max(x, dim=1)")
CUSTOM = """
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x.amax(dim=1), x.argmax(dim=1)
"""


def build(target: Target) -> Job:
    return compare(torch_kernel(REF, io(tensor("x", [128, 1000], 10))), torch_kernel(CUSTOM))


CASE = Honest("torch_multi_output", "torch", "max and argmax as two outputs", build)
