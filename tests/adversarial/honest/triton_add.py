"""Honest Triton: vector add, grid from ``cdiv(n, BLOCK_SIZE)`` (the interpreter on a CPU)."""

from tests.adversarial.corpus import (
    Honest,
    Job,
    Target,
    compare,
    io,
    kernel,
    model,
    output,
    scalar,
    tensor,
    torch_kernel,
)

N = 4096
REF = model("x + y", "x, y")
SOURCE = """
import triton
import triton.language as tl


@triton.jit
def add_kernel(x, y, out, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)
"""


def contract(n: int, block: int) -> dict:
    return io(tensor("x", [n], 1), tensor("y", [n], 2), output("out", [n]), scalar("n", n),
              scalar("BLOCK_SIZE", block, meta=True),
              launch={"grid": {"x": "cdiv(n, BLOCK_SIZE)"}, "num_warps": 4})


def build(target: Target) -> Job:
    c = contract(N, 256)
    return compare(torch_kernel(REF, c), kernel("triton", SOURCE, c))


CASE = Honest("triton_add", "triton", "vector add", build)
