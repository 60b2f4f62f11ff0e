"""Honest CUDA (GPU): scale ``x`` in place; ``x`` is declared ``inout``."""

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

N = 1 << 18
REF = model("x * alpha", "x, alpha")
SOURCE = """
extern "C" __global__ void scale_inplace(float* x, float alpha, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= alpha;
}
"""


def build(target: Target) -> Job:
    ref_io = io(tensor("x", [N], 43), scalar("alpha", 0.75, "float"))
    custom_io = io(tensor("x", [N], 43, role="inout"), scalar("alpha", 0.75, "float"),
                   scalar("n", N), launch={"grid": {"x": N // 256}, "block": {"x": 256}})
    return compare(torch_kernel(REF, ref_io),
                   kernel("cuda", SOURCE, custom_io, kernel_name="scale_inplace"))


CASE = Honest("cuda_inout_scale", "cuda", "in-place scale of an inout tensor", build, gpu=True,
              features=("inout",))
