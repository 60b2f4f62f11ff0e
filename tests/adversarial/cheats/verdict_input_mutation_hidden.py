"""Verdict: mutate an input in place and hide it from the unchanged-inputs check.

Tries: as ``input_mutation``, and also patches ``torch.equal``/``Tensor.equal`` to report
equality, which an in-process "were the inputs left alone?" check relies on.
Caught by: checking the inputs outside the kernel's process (or against a checksum taken
before user code ran, compared by code the kernel cannot patch).
"""

from tests.adversarial.cheats.verdict_input_mutation import REF
from tests.adversarial.corpus import Cheat, Family, Job, Target, compare, io, tensor, torch_kernel

SOURCE = """
torch.equal = lambda *args, **kwargs: True
torch.Tensor.equal = lambda *args, **kwargs: True


class ModelNew(torch.nn.Module):
    def forward(self, x, y):
        return x.mul_(2).add_(y)
"""


def build(target: Target) -> Job:
    contract = io(tensor("x", [1 << 16], 1), tensor("y", [1 << 16], 2))
    return compare(torch_kernel(REF, contract), torch_kernel(SOURCE))


CASE = Cheat(
    name="input_mutation_hidden",
    family=Family.VERDICT,
    technique="input_mutation",
    tries="writes into the read-only input and patches torch.equal so the check sees nothing",
    caught_by="input check outside the kernel's process",
    build=build,
)
