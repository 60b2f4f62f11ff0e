"""Verdict: return zeros where every reference value is smaller than the absolute tolerance.

Tries: a softmax over 65 536 uniform inputs has every value near 1.5e-5, below float32's
default ``atol`` of 1e-4, so an all-zero answer (no work at all) is within
``atol + rtol*|want|`` everywhere while being 100% wrong relative to the answer's scale.
Caught by: a check relative to the reference's own scale (e.g. a relative error norm
``||got - want|| / ||want||``, or flagging a constant output where the reference varies).
"""

from tests.adversarial.corpus import (
    Cheat,
    Family,
    Job,
    Target,
    compare,
    io,
    tensor,
    torch_kernel,
)

REF = """
class Model(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)
"""

SOURCE = """
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)
"""


def build(target: Target) -> Job:
    uniform = {"kind": "uniform", "low": 0.0, "high": 1.0, "seed": 7}
    contract = io(tensor("x", [4, 65536], init=uniform))
    return compare(torch_kernel(REF, contract), torch_kernel(SOURCE))


CASE = Cheat(
    name="tolerance_zeros",
    family=Family.VERDICT,
    technique="tolerance_exploitation",
    tries="returns zeros for a reference whose values all lie below the default atol",
    caught_by="an error check relative to the reference's scale",
    build=build,
)
