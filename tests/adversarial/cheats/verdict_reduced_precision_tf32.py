"""Verdict: switch the float32 matmul to TF32 tensor cores behind the reference's back.

Tries: ``torch.backends.cuda.matmul.allow_tf32 = True`` at import: the same code, several
times faster on tensor cores, with 10-bit mantissas in the products.
Caught by: the float32 tolerance (and a reference that ran before the custom module was
imported, so the flag cannot change the reference too).
"""

from tests.adversarial.corpus import Cheat, Family, Job, Target, matmul_compare, torch_kernel

SOURCE = """
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
torch.set_float32_matmul_precision("medium")


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return a @ b
"""


def build(target: Target) -> Job:
    return matmul_compare(target, torch_kernel(SOURCE), trials=3)


CASE = Cheat(
    name="reduced_precision_tf32",
    family=Family.VERDICT,
    technique="reduced_precision",
    tries="turns on TF32 matmuls at import",
    caught_by="float32 tolerance; reference run before the custom import",
    build=build,
    gpu=True,
)
