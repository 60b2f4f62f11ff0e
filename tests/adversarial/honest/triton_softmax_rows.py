"""Honest Triton: row softmax, one program per row of a [64, 256] matrix."""

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

ROWS, COLS = 64, 256
REF = model("torch.softmax(x, dim=-1)")
SOURCE = """
import triton
import triton.language as tl


@triton.jit
def softmax_rows(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=mask)
"""


def build(target: Target) -> Job:
    c = io(tensor("x", [ROWS, COLS], 22), output("out", [ROWS, COLS]), scalar("n_cols", COLS),
           scalar("BLOCK", COLS, meta=True), launch={"grid": {"x": ROWS}})
    return compare(torch_kernel(REF, c), kernel("triton", SOURCE, c))


CASE = Honest("triton_softmax_rows", "triton", "row softmax", build)
