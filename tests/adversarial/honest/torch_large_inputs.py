"""Honest torch: an elementwise kernel on two 128 MB inputs (GPU), every sample on fresh ones.

Inputs this large used to be the same in every timed sample; the judge now draws them afresh
on the device before each: the honest kernel must still pass unflagged, its number the work's.
"""

from tests.adversarial.corpus import Honest, Job, Target, compare, io, model, tensor, torch_kernel

REF = model("torch.maximum(x, y) * 2 - x", "x, y")
CUSTOM = """
class ModelNew(torch.nn.Module):
    def forward(self, x, y):
        return 2 * torch.maximum(x, y) - x
"""


def build(target: Target) -> Job:
    n = 32 << 20
    return compare(torch_kernel(REF, io(tensor("x", [n], 31), tensor("y", [n], 32))),
                   torch_kernel(CUSTOM), trials=20)


CASE = Honest("torch_large_inputs", "torch", "elementwise on two 128 MB inputs", build,
              gpu=True, features=("large",))
