"""Verdict: return NaN everywhere, for checks written as ``not (diff > tol)``.

Tries: every comparison with NaN is false, so a check that looks for elements *beyond* the
tolerance finds none; the kernel does no work at all.
Caught by: NaN never matching a finite reference value.
"""

from tests.adversarial.corpus import Cheat, Family, Job, Target, matmul_compare, torch_kernel

SOURCE = """
class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return torch.full((a.shape[0], b.shape[1]), float("nan"), device=a.device, dtype=a.dtype)
"""


def build(target: Target) -> Job:
    return matmul_compare(target, torch_kernel(SOURCE), trials=3)


CASE = Cheat(
    name="nan_output",
    family=Family.VERDICT,
    technique="nan_inf_output",
    tries="returns an all-NaN tensor without computing anything",
    caught_by="NaN never matches a finite reference",
    build=build,
)
