"""Honest Triton: scale ``x`` in place; ``x`` is declared ``inout`` and is the output."""

from tests.adversarial.corpus import (
    Honest,
    Job,
    Target,
    compare,
    io,
    kernel,
    model,
    scalar,
    tensor,
    torch_kernel,
)

N = 4096
REF = model("x * alpha", "x, alpha")
SOURCE = """
import triton
import triton.language as tl


@triton.jit
def scale_inplace(x_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(x_ptr + offs, x * alpha, mask=mask)
"""


def build(target: Target) -> Job:
    ref_io = io(tensor("x", [N], 21), scalar("alpha", 1.5, "float"))
    custom_io = io(tensor("x", [N], 21, role="inout"), scalar("alpha", 1.5, "float"),
                   scalar("n", N), scalar("BLOCK", 512, meta=True),
                   launch={"grid": {"x": "cdiv(n, BLOCK)"}})
    return compare(torch_kernel(REF, ref_io), kernel("triton", SOURCE, custom_io))


CASE = Honest("triton_inout_scale", "triton", "in-place scale of an inout tensor", build,
              features=("inout",))
