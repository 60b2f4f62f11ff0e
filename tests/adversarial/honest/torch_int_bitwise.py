"""Honest torch: int32 bitwise arithmetic, compared exactly."""

from tests.adversarial.corpus import Honest, Job, Target, compare, io, model, tensor, torch_kernel

REF = model("(x & y) ^ (x | 7)", "x, y")
CUSTOM = """
class ModelNew(torch.nn.Module):
    def forward(self, x, y):
        return torch.bitwise_xor(torch.bitwise_and(x, y), torch.bitwise_or(x, 7))
"""


def ints(seed: int) -> dict:
    """Normal values of spread 1000, rounded to integers."""
    return {"kind": "randn", "seed": seed, "std": 1000.0}


def build(target: Target) -> Job:
    contract = io(tensor("x", [4096], dtype="int32", init=ints(13)),
                  tensor("y", [4096], dtype="int32", init=ints(14)))
    return compare(torch_kernel(REF, contract), torch_kernel(CUSTOM))


CASE = Honest("torch_int_bitwise", "torch", "int32 bitwise ops", build)
