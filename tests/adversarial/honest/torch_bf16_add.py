"""Honest torch: bfloat16 inputs and output, compared at bfloat16's tolerance."""

from tests.adversarial.corpus import Honest, Job, Target, compare, io, model, tensor, torch_kernel

REF = model("x + y", "x, y")
CUSTOM = model("torch.add(x, y)", "x, y", cls="ModelNew")


def build(target: Target) -> Job:
    contract = io(tensor("x", [4096], 11, dtype="bfloat16"),
                  tensor("y", [4096], 12, dtype="bfloat16"))
    return compare(torch_kernel(REF, contract), torch_kernel(CUSTOM))


CASE = Honest("torch_bf16_add", "torch", "bfloat16 add", build)
