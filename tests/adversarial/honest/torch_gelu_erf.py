"""Honest torch: exact GELU from ``erf``, against ``F.gelu``."""

from tests.adversarial.corpus import Honest, Job, Target, compare, io, model, tensor, torch_kernel

REF = model("F.gelu(x)")
CUSTOM = """
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.erf(x * 0.7071067811865476))
"""


def build(target: Target) -> Job:
    return compare(torch_kernel(REF, io(tensor("x", [1 << 16], 5))), torch_kernel(CUSTOM))


CASE = Honest("torch_gelu_erf", "torch", "gelu from erf", build)
