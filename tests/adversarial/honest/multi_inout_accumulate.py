"""Honest multi_kernel: accumulate into a tensor declared ``inout``."""

from tests.adversarial.corpus import (
    Honest,
    Job,
    Target,
    compare,
    io,
    kernel,
    model,
    tensor,
    torch_kernel,
)

N = 4096
REF = model("acc + 0.5 * x", "acc, x")
SOURCE = """
def accumulate(acc, x):
    acc.add_(x, alpha=0.5)
"""


def build(target: Target) -> Job:
    ref_io = io(tensor("acc", [N], 36), tensor("x", [N], 37))
    custom_io = io(tensor("acc", [N], 36, role="inout"), tensor("x", [N], 37))
    return compare(torch_kernel(REF, ref_io),
                   kernel("multi_kernel", SOURCE, custom_io, entry_point="accumulate"))


CASE = Honest("multi_inout_accumulate", "multi_kernel", "accumulate into an inout tensor",
              build, features=("inout",))
