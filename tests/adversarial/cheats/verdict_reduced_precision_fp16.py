"""Verdict: do the float32 matmul in float16 and cast the answer back to float32.

Tries: half-precision arithmetic (tensor cores on a GPU) at 10 bits of mantissa; the output has the
right dtype and shape but errors far beyond the float32 tolerance.
Caught by: the float32 tolerance.
"""

from tests.adversarial.corpus import Cheat, Family, Job, Target, matmul_compare, torch_kernel

SOURCE = """
class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return (a.half() @ b.half()).float()
"""


def build(target: Target) -> Job:
    return matmul_compare(target, torch_kernel(SOURCE), trials=3)


CASE = Cheat(
    name="reduced_precision_fp16",
    family=Family.VERDICT,
    technique="reduced_precision",
    tries="computes the float32 matmul in float16 tensor cores and casts back",
    caught_by="float32 tolerance",
    build=build,
)
