"""Verdict: compute in place in an input buffer instead of allocating the output.

Tries: ``x.mul_(2).add_(y)`` returns the right values but overwrites the input ``x`` that
the IOContract declares read-only (the reference leaves it unchanged); a later call, or the
reference run after it, would see corrupted inputs.
Caught by: checking inputs unchanged after every call (already in place: a control case).
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
    def forward(self, x, y):
        return x * 2 + y
"""

SOURCE = """
class ModelNew(torch.nn.Module):
    def forward(self, x, y):
        return x.mul_(2).add_(y)
"""


def build(target: Target) -> Job:
    contract = io(tensor("x", [1 << 16], 1), tensor("y", [1 << 16], 2))
    return compare(torch_kernel(REF, contract), torch_kernel(SOURCE))


CASE = Cheat(
    name="input_mutation",
    family=Family.VERDICT,
    technique="input_mutation",
    tries="writes its result into the read-only input x and returns it",
    caught_by="inputs checked unchanged after each call",
    build=build,
)
