"""Evaluate a raw CUDA kernel, described by an IOContract with its launch configuration.

    python client/examples/cuda_evaluate.py [SERVER_URL]

Needs a server with a CUDA GPU: a CPU-mode server answers that cuda kernels need one.
"""

from __future__ import annotations

import sys

from kernel_eval_client import (
    IOContractBuilder,
    KernelCode,
    KernelEvalClient,
    KernelMetadata,
    KernelType,
    Outcome,
    create_randn_spec,
)

SOURCE = """
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + b[i];
    }
}
"""
N, BLOCK = 1 << 20, 256


def main(server_url: str | None) -> int:
    io = (
        IOContractBuilder()
        .add_input_tensor("a", create_randn_spec([N], seed=1))
        .add_input_tensor("b", create_randn_spec([N], seed=2))
        .add_output_tensor("c", [N], "float32")
        .add_scalar("n", "int", N)
        .set_grid((N + BLOCK - 1) // BLOCK)
        .set_block(BLOCK)
        .build()
    )
    kernel = KernelCode(
        source_code=SOURCE,
        kernel_type=KernelType.CUDA,
        io=io,
        metadata=KernelMetadata(kernel_name="vector_add"),  # required for cuda
    )

    with KernelEvalClient(server_url) as client:
        health = client.health()
        if not health.gpu_available:
            print(f"this server runs in {health.device} mode; cuda kernels need a CUDA GPU")
            return 2
        response = client.evaluate(kernel, num_trials=100)

    result = response.kernel_exec_result
    assert result is not None, response.error
    print(f"job {response.job_id}: {result.outcome.value}")
    if result.outcome is not Outcome.SUCCESS:
        print(result.compilation_error or result.runtime_error)
        return 1
    stats = result.runtime_stats
    assert stats is not None
    gbps = 3 * N * 4 / (stats.median * 1e-3) / 1e9
    print(
        f"runtime {stats.median * 1000:.1f} us median ({stats.num_samples} samples, "
        f"{stats.method}), {gbps:.0f} GB/s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None))
