"""Honest Triton: two output tensors from one kernel (sum and product)."""

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

N = 2048
REF = model("x + y, x * y", "x, y")
SOURCE = """
import triton
import triton.language as tl


@triton.jit
def sum_and_product(x_ptr, y_ptr, s_ptr, p_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(s_ptr + offs, x + y, mask=mask)
    tl.store(p_ptr + offs, x * y, mask=mask)
"""


def build(target: Target) -> Job:
    c = io(tensor("x", [N], 28), tensor("y", [N], 29), output("s", [N]), output("p", [N]),
           scalar("n", N), scalar("BLOCK", 512, meta=True),
           launch={"grid": {"x": "cdiv(n, BLOCK)"}})
    return compare(torch_kernel(REF, c), kernel("triton", SOURCE, c))


CASE = Honest("triton_two_outputs", "triton", "two outputs from one kernel", build)
