"""Hardware work queues on a CUDA GPU, through the real server: a plain kernel runs in a spare
made with one queue; a kernel that uses two streams gets a process made for it with CUDA's
default, and its streams still overlap (each spins until the other has started, so with one
shared queue it would never finish); a comparison says which its two processes had. A quick
answer (one fixed sample) says its warm-up was shortened."""

from __future__ import annotations

import httpx
import pytest

from tests.gpu.test_timing_figures import RELU_SMALL, evaluate, tensor, torch_kernel

pytestmark = [pytest.mark.gpu, pytest.mark.e2e]

# Two streams that must run at once: a CuPy kernel on each waits (bounded) for the other's
# flag. Sharing one hardware queue, the second waits behind the first, which times out.
MEETING = r'''
import cupy as cp
import torch

_MEET = cp.RawKernel(r"""
extern "C" __global__ void meet(volatile int* flags, int me, int* met) {
    flags[me] = 1;
    long long start = clock64();
    while (flags[1 - me] == 0) {
        if (clock64() - start > 2000000000LL) { met[me] = 0; return; }
    }
    met[me] = 1;
}
""", "meet")


class Model(torch.nn.Module):
    def forward(self, x):
        flags = torch.zeros(2, dtype=torch.int32, device=x.device)
        met = torch.zeros(2, dtype=torch.int32, device=x.device)
        streams = [torch.cuda.Stream(), torch.cuda.Stream()]
        here = torch.cuda.current_stream()
        for me, stream in enumerate(streams):
            stream.wait_stream(here)
            with cp.cuda.ExternalStream(stream.cuda_stream):
                _MEET((1,), (1,), (cp.asarray(flags), cp.int32(me), cp.asarray(met)))
        for stream in streams:
            here.wait_stream(stream)
        return x * met.min().to(x.dtype)
'''
X = [tensor("x", [1024], 1)]
MEETING_KERNEL = {"source_code": MEETING, "kernel_type": "torch", "io": {"args": X}}
SAME = torch_kernel("return x * 1", X)


def test_a_plain_kernel_runs_with_one_queue_and_a_quick_answer_says_its_warm_up_was_short(
        client: httpx.Client) -> None:
    result = evaluate(client, RELU_SMALL, num_trials=1)
    assert result["metadata"]["work_queues"] == 1
    figures = result["metadata"]["timing_figures"]
    assert figures["warm_up_calls"] == 3
    assert "quick answer" in figures["warm_up_reason"], figures


def test_a_kernel_on_two_streams_gets_cudas_default_queues_and_its_streams_overlap(
        client: httpx.Client) -> None:
    r = client.post("/validate", json={"kernel": MEETING_KERNEL, "timeout": 300})
    assert r.status_code == 200, r.text
    result = r.json()["kernel_exec_result"]
    assert result["outcome"] == "success", result
    assert result["metadata"]["work_queues"] == 8


def test_a_comparison_says_which_queues_its_two_processes_had(client: httpx.Client) -> None:
    # five samples: no CUDA-graph figure is tried (a graph's branches are not the point here)
    r = client.post("/compare", json={"ref_kernel": SAME, "custom_kernel": MEETING_KERNEL,
                                      "timeout": 300, "num_trials": 5})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["kernel_exec_result"]["correctness"] is True, body
    assert body["ref_exec_result"]["metadata"]["work_queues"] == 1, body
    assert body["kernel_exec_result"]["metadata"]["work_queues"] == 8, body
