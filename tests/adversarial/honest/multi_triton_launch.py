"""Honest multi_kernel: a Python entry point that launches its own Triton kernel."""

from tests.adversarial.corpus import (
    Honest,
    Job,
    Target,
    compare,
    io,
    kernel,
    model,
    output,
    tensor,
    torch_kernel,
)

N = 5000
REF = model("x * y + 1", "x, y")
SOURCE = """
import torch
import triton
import triton.language as tl


@triton.jit
def fma_one(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * y + 1.0, mask=mask)


def run(x, y, out):
    n = x.numel()
    fma_one[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
"""


def build(target: Target) -> Job:
    c = io(tensor("x", [N], 33), tensor("y", [N], 34), output("out", [N]))
    return compare(torch_kernel(REF, c), kernel("multi_kernel", SOURCE, c, entry_point="run"))


CASE = Honest("multi_triton_launch", "multi_kernel", "entry point launching Triton", build)
