"""Honest Triton: a tiled matmul with ``tl.dot`` in IEEE float32 (no TF32 on a GPU)."""

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

N = 64
REF = model("a @ b", "a, b")
SOURCE = """
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK + tl.arange(0, BLOCK)
    cols = pid_n * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k in range(0, n, BLOCK):
        ks = k + tl.arange(0, BLOCK)
        a = tl.load(a_ptr + rows[:, None] * n + ks[None, :])
        b = tl.load(b_ptr + ks[:, None] * n + cols[None, :])
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rows[:, None] * n + cols[None, :], acc)
"""


def build(target: Target) -> Job:
    c = io(tensor("a", [N, N], 23), tensor("b", [N, N], 24), output("c", [N, N]), scalar("n", N),
           scalar("BLOCK", 32, meta=True),
           launch={"grid": {"x": "cdiv(n, BLOCK)", "y": "cdiv(n, BLOCK)"}})
    return compare(torch_kernel(REF, c), kernel("triton", SOURCE, c))


CASE = Honest("triton_matmul", "triton", "tiled matmul with tl.dot", build)
