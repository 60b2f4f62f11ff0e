"""The arena a judge and a kernel's process share on the GPU (harness.arena): one mapping per
pairing, the kernel called on the input slots themselves."""

from __future__ import annotations

import multiprocessing
import os
import socket

import httpx
import pytest
import torch

pytestmark = [pytest.mark.gpu]


def _kernel_side(sock: socket.socket, n: int) -> None:
    """Another process: map the arena the judge sent, read its inputs, write its outputs."""
    import json

    from harness.arena import Arena
    from shared.protocol import ArenaLayout

    msg, fds, _, _ = socket.recv_fds(sock, 1 << 16, 1)
    try:
        arena = Arena.attach(ArenaLayout.model_validate(json.loads(msg)), fds[0], "cuda")
        x, y = arena.values()
        arena.outputs[0].copy_(x * 2 + y[:1])
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - said to the judge, which waits for an answer
        sock.send(f"{type(exc).__name__}: {exc}".encode()[:4096])
        return
    sock.send(str(arena.inputs[0].data_ptr() == x.data_ptr()).encode())
    sock.recv(1)  # the judge has read the outputs: exit (our mapping dies with us)


def test_the_kernels_process_computes_on_the_slots_and_the_judge_reads_its_outputs() -> None:
    from harness.arena import Arena, plan

    n = 64 << 20  # 256 MB of floats
    x = torch.arange(n, dtype=torch.float32, device="cuda")
    y = torch.full((3,), 0.5, device="cuda")
    judge = Arena.create(plan([x, y], [torch.empty(n, device="cuda")], "device"), "cuda")
    for slot, value in zip(judge.inputs, (x, y)):
        slot.copy_(value)
    torch.cuda.synchronize()
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = socket.socketpair()
    proc = ctx.Process(target=_kernel_side, args=(theirs, n))
    proc.start()
    theirs.close()
    ours.settimeout(60)
    socket.send_fds(ours, [judge.layout.model_dump_json().encode()], [judge.fd])
    zero_copy = ours.recv(4096)
    assert zero_copy == b"True"  # the kernel's inputs are the slots: nothing copied in
    assert torch.equal(judge.outputs[0], x * 2 + 0.5)
    ours.send(b"x")
    proc.join(60)
    assert proc.exitcode == 0
    judge.close()


def test_a_descriptor_that_is_not_gpu_memory_is_an_arena_error() -> None:
    from harness.arena import Arena, ArenaError, plan

    torch.cuda.init()
    layout = plan([torch.zeros(1024, device="cuda")], [], "device")
    fd = os.memfd_create("not-gpu-memory")
    os.ftruncate(fd, layout.size)
    with pytest.raises(ArenaError, match="could not be mapped"):
        Arena.attach(layout, fd, "cuda")


@pytest.mark.e2e
def test_a_gigabyte_comparison_shares_its_tensors_in_gpu_memory(client: httpx.Client) -> None:
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


@pytest.mark.e2e
def test_a_batchs_twins_on_kept_calibrations_each_read_their_first_trials_inputs_whole(
        client: httpx.Client) -> None:
    # A later candidate of a batch gets a new arena, and where the judge's calibration is kept
    # no null call has written its slots: its trial 0 reads what the judge copied there, which
    # the judge must wait for (else a twin reads memory not yet written, and is "incorrect").
    import json

    ref = ("class Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
           "def get_inputs():\n    return [torch.randn(4096, 8192)]\n"
           "def get_init_inputs():\n    return []\n")
    twin = {"source_code": ref.replace("class Model", "class ModelNew"), "kernel_type": "torch"}
    body = {"ref_kernel": {"source_code": ref, "kernel_type": "torch"},
            "custom_kernels": [twin] * 8, "num_trials": 5, "num_correct_trials": 1}
    results = []
    with client.stream("POST", "/compare/batch", json=body, timeout=600) as r:
        for line in r.iter_lines():
            item = json.loads(line)
            if "index" in item:
                results.append(item["response"]["kernel_exec_result"])
    assert len(results) == 8
    wrong = [(k["outcome"], k.get("validation_error")) for k in results if not k["correctness"]]
    assert not wrong, wrong
    kept = [k["metadata"]["judge_calibration"]["kept"] for k in results]
    assert any(kept), f"no candidate was judged on a kept calibration: {kept}"
