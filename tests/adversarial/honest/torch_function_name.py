"""Honest torch: the custom kernel is a named function (``metadata.function_name``); the
module's ``Model`` is a decoy that must not be called."""

from tests.adversarial.corpus import Honest, Job, Target, compare, io, model, tensor, torch_kernel

REF = model("x.sum(dim=-1)")
CUSTOM = """
def row_sums(x):
    return torch.sum(x, dim=-1)


class Model(torch.nn.Module):
    def forward(self, x):
        raise RuntimeError("the function, not the class, is the kernel")
"""


def build(target: Target) -> Job:
    return compare(torch_kernel(REF, io(tensor("x", [256, 1024], 8))),
                   torch_kernel(CUSTOM, function_name="row_sums"))


CASE = Honest("torch_function_name", "torch", "row sums via a named function", build)
