"""Honest Triton: ``a * x + y`` with a float scalar argument."""

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

N = 3000  # not a multiple of the block: the mask matters
REF = model("a * x + y", "a, x, y")
SOURCE = """
import triton
import triton.language as tl


@triton.jit
def axpy(a, x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, a * x + y, mask=mask)
"""


def build(target: Target) -> Job:
    c = io(scalar("a", 2.5, "float"), tensor("x", [N], 26), tensor("y", [N], 27),
           output("out", [N]),
           scalar("n", N), scalar("BLOCK", 1024, meta=True),
           launch={"grid": {"x": "cdiv(n, BLOCK)"}})
    return compare(torch_kernel(REF, c), kernel("triton", SOURCE, c))


CASE = Honest("triton_axpy_scalar", "triton", "axpy with a float scalar", build)
