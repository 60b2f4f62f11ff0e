"""Honest CUDA (GPU): row sums with a shared-memory tree reduction, one block per row."""

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

ROWS, COLS = 1024, 1024
REF = model("x.sum(dim=1)")
SOURCE = """
extern "C" __global__ void row_sum(const float* x, float* out, int cols) {
    __shared__ float partial[256];
    const float* row = x + (size_t)blockIdx.x * cols;
    float acc = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += row[c];
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}
"""


def build(target: Target) -> Job:
    c = io(tensor("x", [ROWS, COLS], 44), output("out", [ROWS]), scalar("cols", COLS),
           launch={"grid": {"x": ROWS}, "block": {"x": 256}})
    return compare(torch_kernel(REF, c), kernel("cuda", SOURCE, c, kernel_name="row_sum"))


CASE = Honest("cuda_row_sum_shared", "cuda", "row sums in shared memory", build, gpu=True)
