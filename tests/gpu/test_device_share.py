"""Tensors that cross between worker processes without leaving the GPU."""

from __future__ import annotations

import multiprocessing
import os
import socket

import httpx
import pytest
import torch

pytestmark = [pytest.mark.gpu]


def _exporter(sock: socket.socket, n: int) -> None:
    """Another process: export ``n`` floats 0..n-1 and a half tensor, send the fd, exit."""
    from validation import transfer

    values = [torch.arange(n, dtype=torch.float32, device="cuda"),
              torch.full((3, 7), 2.5, dtype=torch.float16, device="cuda").t()]
    description, layout, fd = transfer.export(values, on_device=True)
    import json

    socket.send_fds(sock, [json.dumps([description, layout]).encode()], [fd])
    os.close(fd)
    sock.recv(1)  # wait until the parent has the fd, then exit (our mappings die with us)


def test_gpu_memory_crosses_processes_and_outlives_its_sender() -> None:
    from validation import transfer

    n = 64 << 20  # 256 MB of floats
    ctx = multiprocessing.get_context("spawn")
    parent, child = socket.socketpair()
    proc = ctx.Process(target=_exporter, args=(child, n))
    proc.start()
    msg, fds, _, _ = socket.recv_fds(parent, 1 << 16, 1)
    parent.send(b"x")
    proc.join(60)
    assert proc.exitcode == 0
    import json

    description, layout = json.loads(msg)
    assert transfer.on_device(layout)
    got = transfer.load(description, layout, fds[0], "cuda", expect_sealed=False)
    os.close(fds[0])
    assert torch.equal(got[0], torch.arange(n, dtype=torch.float32, device="cuda"))
    assert got[1].shape == (7, 3) and bool((got[1] == 2.5).all())


def test_a_descriptor_that_is_not_gpu_memory_is_a_transfer_error() -> None:
    from validation import transfer

    torch.cuda.init()
    layout = [{"dtype": "float32", "shape": [1024], "offset": 0, "nbytes": 4096, "where": "device"}]
    fd = os.memfd_create("not-gpu-memory")
    os.ftruncate(fd, 4096)
    try:
        with pytest.raises(transfer.TransferError, match="could not be read"):
            transfer.load([{"tensor": 0}], layout, fd, "cuda", expect_sealed=False)
    finally:
        os.close(fd)


@pytest.mark.e2e
def test_a_gigabyte_comparison_keeps_its_tensors_on_the_gpu(client: httpx.Client) -> None:
    ref = ("class Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.sigmoid(x)\n"
           "def get_inputs():\n    return [torch.randn(16384, 16384)]\n"
           "def get_init_inputs():\n    return []\n")
    good = ref.replace("class Model", "class ModelNew").replace("torch.sigmoid(x)",
                                                                "1 / (1 + torch.exp(-x))")
    bad = ref.replace("class Model", "class ModelNew").replace("torch.sigmoid(x)",
                                                               "torch.sigmoid(x[:, :1]).expand_as(x)")
    for source, correct in ((good, True), (bad, False)):
        r = client.post("/compare", json={
            "ref_kernel": {"source_code": ref, "kernel_type": "torch"},
            "custom_kernel": {"source_code": source, "kernel_type": "torch"},
            "num_trials": 10, "num_correct_trials": 3}, timeout=300).json()
        result = r["kernel_exec_result"]
        assert result["correctness"] is correct, result
        if correct:
            assert result["metadata"]["tensor_transfer"] == "gpu"
            assert result["metadata"]["correctness_trials"] == 3
            assert result["metadata"]["resources"]["input_bytes"] == 16384 * 16384 * 4
