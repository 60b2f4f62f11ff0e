"""Verdict: compute a cheaper function whose error sits just under float16's loose tolerance.

Tries: float16 outputs are compared at ``atol = rtol = 1e-2``. For ``exp(x)`` on inputs in
[0, 0.45] the truncated series ``1 + x + x²/2`` stays within that everywhere (its error is at
most about 0.018 where the band is at least 0.02), yet it is not the function asked for: its
relative error norm is about 5e-3, ten times float16's own rounding error.
Caught by: an error measure relative to what the dtype's rounding explains (e.g. the relative
error norm ``||got - want|| / ||want||`` against a limit near the dtype's epsilon), not only
the loose per-element band.
"""

from tests.adversarial.corpus import (
    Cheat,
    Family,
    Job,
    Target,
    compare,
    io,
    model,
    tensor,
    torch_kernel,
)

REF = model("torch.exp(x)")
SOURCE = """
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return 1 + x + 0.5 * x * x
"""


def build(target: Target) -> Job:
    uniform = {"kind": "uniform", "low": 0.0, "high": 0.45, "seed": 17}
    contract = io(tensor("x", [1 << 16], dtype="float16", init=uniform))
    return compare(torch_kernel(REF, contract), torch_kernel(SOURCE))


CASE = Cheat(
    name="tolerance_loose_fp16",
    family=Family.VERDICT,
    technique="tolerance_exploitation",
    tries="returns a truncated series for exp whose error hides under float16's 1e-2 band",
    caught_by="an error measure relative to the dtype's rounding (relative error norm)",
    build=build,
)
