"""Honest CUDA (GPU): saxpy over 16M elements."""

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

N = 1 << 24
REF = model("a * x + y", "a, x, y")
SOURCE = """
extern "C" __global__ void saxpy(float a, const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}
"""


def build(target: Target) -> Job:
    c = io(scalar("a", 2.0, "float"), tensor("x", [N], 45), tensor("y", [N], 46),
           output("out", [N]),
           scalar("n", N), launch={"grid": {"x": N // 256}, "block": {"x": 256}})
    return compare(torch_kernel(REF, c), kernel("cuda", SOURCE, c, kernel_name="saxpy"), trials=20)


CASE = Honest("cuda_saxpy_large", "cuda", "saxpy on 16M elements", build, gpu=True,
              features=("large",))
