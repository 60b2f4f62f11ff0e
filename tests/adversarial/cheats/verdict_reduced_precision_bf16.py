"""Verdict: do the float32 matmul in bfloat16 and cast the answer back to float32.

Tries: half the memory traffic and tensor-core speed, at 8 bits of mantissa; the output has
the right dtype and shape but errors around 1e-2, a hundred times the float32 tolerance.
Caught by: the float32 tolerance (a control case: it must not be loosened for speed).
"""

from tests.adversarial.corpus import Cheat, Family, Job, Target, matmul_compare, torch_kernel

SOURCE = """
class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return (a.to(torch.bfloat16) @ b.to(torch.bfloat16)).to(a.dtype)
"""


def build(target: Target) -> Job:
    return matmul_compare(target, torch_kernel(SOURCE), trials=3)


CASE = Cheat(
    name="reduced_precision_bf16",
    family=Family.VERDICT,
    technique="reduced_precision",
    tries="computes the float32 matmul in bfloat16 and casts back",
    caught_by="float32 tolerance",
    build=build,
)
