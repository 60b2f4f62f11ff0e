"""Compare two PyTorch kernels: is the custom one correct, and how much faster is it?

    python client/examples/compare_torch.py [SERVER_URL]

Works on any server, CPU mode included.
"""

from __future__ import annotations

import sys

from kernel_eval_client import (
    IOContractBuilder,
    KernelCode,
    KernelEvalClient,
    KernelType,
    create_randn_spec,
)

REFERENCE = """
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x, approximate="tanh")
"""

CUSTOM = """
import math
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
"""


def main(server_url: str | None) -> int:
    io = IOContractBuilder().add_input_tensor("x", create_randn_spec([4096, 1024], seed=7)).build()
    ref = KernelCode(source_code=REFERENCE, kernel_type=KernelType.TORCH, io=io)
    custom = KernelCode(source_code=CUSTOM, kernel_type=KernelType.TORCH, io=io)

    with KernelEvalClient(server_url) as client:
        response = client.compare(ref, custom, num_trials=50, num_correct_trials=3, atol=1e-5)

    result = response.kernel_exec_result
    assert result is not None, response.error
    print(f"job {response.job_id}: {result.outcome.value}")
    if not result.correctness:
        print(
            result.validation_error
            or result.compilation_error
            or result.runtime_error
            or response.error
        )
        return 1
    assert response.ref_runtime is not None
    print(
        f"reference {response.ref_runtime.mean:.4f} ms, custom {result.runtime:.4f} ms: "
        f"speedup {response.ref_runtime.mean / result.runtime:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None))
