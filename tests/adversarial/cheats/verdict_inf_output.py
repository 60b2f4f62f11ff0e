"""Verdict: return +Inf everywhere, for checks whose tolerance grows with the values.

Tries: with ``rtol * |got|`` (instead of ``|want|``) on the right-hand side, or an
``inf - inf`` that turns into NaN, a check can accept infinities; no work is done.
Caught by: an infinity matching only the same infinity in the reference.
"""

from tests.adversarial.corpus import Cheat, Family, Job, Target, matmul_compare, torch_kernel

SOURCE = """
class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return torch.full((a.shape[0], b.shape[1]), float("inf"), device=a.device, dtype=a.dtype)
"""


def build(target: Target) -> Job:
    return matmul_compare(target, torch_kernel(SOURCE), trials=3)


CASE = Cheat(
    name="inf_output",
    family=Family.VERDICT,
    technique="nan_inf_output",
    tries="returns an all-Inf tensor without computing anything",
    caught_by="Inf matches only the same Inf in the reference",
    build=build,
)
