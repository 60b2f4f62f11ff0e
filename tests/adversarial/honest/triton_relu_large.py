"""Honest Triton: ReLU over a large vector (64K elements in the interpreter, 16M on a GPU)."""

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

REF = model("torch.relu(x)")
SOURCE = """
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)
"""


def build(target: Target) -> Job:
    n, block = (1 << 24, 1024) if target.gpu else (1 << 16, 8192)
    c = io(tensor("x", [n], 25), output("out", [n]), scalar("n", n),
           scalar("BLOCK", block, meta=True), launch={"grid": {"x": "cdiv(n, BLOCK)"}})
    return compare(torch_kernel(REF, c), kernel("triton", SOURCE, c))


CASE = Honest("triton_relu_large", "triton", "relu on a large vector", build, features=("large",))
