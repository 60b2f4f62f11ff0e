"""Evaluate a PyTorch kernel: compile it, run it and time it on the server.

    python client/examples/torch_evaluate.py [SERVER_URL]

Works on any server, CPU mode included (timings are then CPU timings).
"""

from __future__ import annotations

import sys

from kernel_eval_client import (
    IOContractBuilder,
    KernelCode,
    KernelEvalClient,
    KernelType,
    Outcome,
    create_randn_spec,
)

SOURCE = """
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2
"""


def main(server_url: str | None) -> int:
    io = IOContractBuilder().add_input_tensor("x", create_randn_spec([1024, 512], seed=42)).build()
    kernel = KernelCode(source_code=SOURCE, kernel_type=KernelType.TORCH, io=io)

    with KernelEvalClient(server_url) as client:
        response = client.evaluate(kernel, num_trials=100)

    result = response.kernel_exec_result
    assert result is not None, response.error
    print(f"job {response.job_id}: {result.outcome.value}")
    if result.outcome is not Outcome.SUCCESS:
        print(result.compilation_error or result.runtime_error)
        return 1
    stats = result.runtime_stats
    assert stats is not None
    print(f"runtime {stats.mean:.4f} ms mean, {stats.median:.4f} median, {stats.std:.4f} std")
    print(
        f"        p95 {stats.percentile_95:.4f}, p99 {stats.percentile_99:.4f} "
        f"({stats.num_samples} samples, {stats.method} on {stats.device})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None))
