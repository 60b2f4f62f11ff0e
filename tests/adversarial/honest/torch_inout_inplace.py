"""Honest torch: a function that writes its answer into ``x``, declared ``inout``.

The reference returns ``x * 2 + y``; the custom function updates ``x`` in place and returns
nothing, so its output is the inout tensor. Writing an inout tensor is no input mutation.
"""

from tests.adversarial.corpus import Honest, Job, Target, compare, io, model, tensor, torch_kernel

REF = model("x * 2 + y", "x, y")
CUSTOM = """
def scale_add_(x, y):
    x.mul_(2).add_(y)
"""


def build(target: Target) -> Job:
    ref_io = io(tensor("x", [1 << 14], 1), tensor("y", [1 << 14], 2))
    custom_io = io(tensor("x", [1 << 14], 1, role="inout"), tensor("y", [1 << 14], 2))
    return compare(torch_kernel(REF, ref_io),
                   torch_kernel(CUSTOM, custom_io, function_name="scale_add_"))


CASE = Honest("torch_inout_inplace", "torch", "in-place update of an inout tensor", build,
              features=("inout",))
