"""Honest torch: a kernel of a few microseconds (an add of 4096 floats), where the judge's
clock holds more fixed cost than work: its bound must not flag it."""

from tests.adversarial.corpus import Honest, Job, Target, compare, io, model, tensor, torch_kernel

REF = model("x + y", "x, y")
CUSTOM = """
class ModelNew(torch.nn.Module):
    def forward(self, x, y):
        return torch.add(x, y)
"""


def build(target: Target) -> Job:
    return compare(torch_kernel(REF, io(tensor("x", [4096], 41), tensor("y", [4096], 42))),
                   torch_kernel(CUSTOM), trials=50)


CASE = Honest("torch_microsecond_add", "torch", "an add of 4096 floats (a few microseconds)",
              build, features=("small",))
