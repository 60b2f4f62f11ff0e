"""Evaluate a Triton kernel, described by an IOContract (Triton kernels need one).

    python client/examples/triton_evaluate.py [SERVER_URL]

Runs on a GPU server, and on a CPU-mode server too, where Triton's interpreter runs the kernel
(TRITON_INTERPRET=1; slow, and timed as CPU code) provided the server has triton installed:
``kernel-eval health`` lists the kernel types a server accepts.
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
    create_ones_spec,
    create_randn_spec,
)

SOURCE = """
import triton
import triton.language as tl

@triton.jit
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, x + y, mask=mask)
"""
N, BLOCK = 4096, 256


def main(server_url: str | None) -> int:
    io = (
        IOContractBuilder()
        .add_input_tensor("x", create_randn_spec([N], seed=42))
        .add_input_tensor("y", create_ones_spec([N]))
        .add_output_tensor("output", [N], "float32")
        .add_scalar("n_elements", "int", N)
        .add_meta_param("BLOCK_SIZE", BLOCK)  # a tl.constexpr
        .set_grid(N // BLOCK)
        .set_num_warps(4)
        .build()
    )
    kernel = KernelCode(
        source_code=SOURCE,
        kernel_type=KernelType.TRITON,
        io=io,
        metadata=KernelMetadata(kernel_name="add_kernel"),
    )

    with KernelEvalClient(server_url) as client:
        health = client.health()
        if KernelType.TRITON not in health.kernel_types:
            print(f"this server ({health.device} mode) does not run triton kernels")
            return 2
        response = client.evaluate(kernel, num_trials=20 if health.device == "cpu" else 100)

    result = response.kernel_exec_result
    assert result is not None, response.error
    print(f"job {response.job_id}: {result.outcome.value}")
    if result.outcome is not Outcome.SUCCESS:
        print(result.compilation_error or result.runtime_error)
        return 1
    assert result.runtime_stats is not None
    print(
        f"runtime {result.runtime:.4f} ms mean over {result.runtime_stats.num_samples} samples "
        f"({result.runtime_stats.method} on {result.runtime_stats.device})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None))
