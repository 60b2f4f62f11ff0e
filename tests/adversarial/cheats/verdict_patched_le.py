"""Verdict: make every tolerance comparison true by patching the tensor operators.

Tries: ``torch.Tensor.__le__``/``__lt__`` return all-True and ``__ge__``/``__gt__`` all-False,
so ``|got - want| <= atol + rtol*|want|`` holds everywhere; the kernel returns zeros.
Caught by: comparing outputs in a process that never imported user code.
"""

from tests.adversarial.corpus import Cheat, Family, Job, Target, matmul_compare, torch_kernel

SOURCE = """
def _everywhere(value):
    return lambda self, other: torch.full(self.shape, value, dtype=torch.bool, device=self.device)


torch.Tensor.__le__ = _everywhere(True)
torch.Tensor.__lt__ = _everywhere(True)
torch.Tensor.__ge__ = _everywhere(False)
torch.Tensor.__gt__ = _everywhere(False)


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return torch.zeros(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
"""


def build(target: Target) -> Job:
    return matmul_compare(target, torch_kernel(SOURCE), trials=3)


CASE = Cheat(
    name="patched_tensor_le",
    family=Family.VERDICT,
    technique="patched_comparison",
    tries="Tensor.__le__/__lt__ always True (__ge__/__gt__ False); returns zeros",
    caught_by="output comparison outside the kernel's process",
    build=build,
)
