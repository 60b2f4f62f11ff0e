"""Honest CUDA (GPU): vector add through NVRTC."""

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

N = 1 << 16
REF = model("x + y", "x, y")
SOURCE = """
extern "C" __global__ void add(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + y[i];
}
"""


def contract(n: int) -> dict:
    return io(tensor("x", [n], 41), tensor("y", [n], 42), output("out", [n]), scalar("n", n),
              launch={"grid": {"x": (n + 255) // 256}, "block": {"x": 256}})


def build(target: Target) -> Job:
    c = contract(N)
    return compare(torch_kernel(REF, c), kernel("cuda", SOURCE, c, kernel_name="add"))


CASE = Honest("cuda_add", "cuda", "vector add", build, gpu=True)
