"""Verdict: return ``torch.empty`` and hope it holds the reference's freed answer.

Tries: the reference ran in this process just before, and PyTorch's caching allocator hands
its freed output block to the next allocation of that size, answer included. The output
shape is not square, so no input clone takes that block first.
Caught by: the reference not running in the kernel's process (or its freed blocks being
scrubbed), and correctness trials on fresh inputs whose answers differ.
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
    def forward(self, a, b):
        return a @ b
"""

SOURCE = """
class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
"""


def build(target: Target) -> Job:
    contract = io(tensor("a", [1024, 512], 1), tensor("b", [512, 768], 2))
    return compare(torch_kernel(REF, contract), torch_kernel(SOURCE), trials=3)


CASE = Cheat(
    name="uninitialized_memory",
    family=Family.VERDICT,
    technique="uninitialized_memory",
    tries="returns torch.empty, expecting the reference's freed output block",
    caught_by="reference outside the kernel's process; fresh inputs per trial",
    build=build,
    gpu=True,
)
