"""The arena a judge and a kernel's process both map (harness.arena), on the CPU: what one
side writes the other sees, values are rebuilt around the slots, bad layouts are refused."""

from __future__ import annotations

import os

import pytest
import torch

from harness.arena import CONTROL_BYTES, Arena, ArenaError, plan
from harness.tensors import fingerprint


def attached(arena: Arena) -> Arena:
    """The kernel's side: the same memory mapped again from the judge's descriptor."""
    return Arena.attach(arena.layout, os.dup(arena.fd), "cpu")


def test_inputs_the_judge_writes_are_what_the_kernels_side_sees_and_its_outputs_come_back(
        ) -> None:
    x, y = torch.arange(6.0).reshape(2, 3), torch.ones(4, dtype=torch.int64)
    out = torch.zeros(3)
    judge = Arena.create(plan([x, 2.5, (y, None)], [out], "host"), "cpu")
    kernel = attached(judge)
    judge.inputs[0].copy_(x)
    judge.inputs[1].copy_(y)
    values = kernel.values()
    assert torch.equal(values[0], x) and values[1] == 2.5
    assert isinstance(values[2], tuple) and torch.equal(values[2][0], y) and values[2][1] is None
    kernel.outputs[0].copy_(torch.tensor([1.0, 2.0, 3.0]))
    assert judge.outputs[0].tolist() == [1.0, 2.0, 3.0]
    # the kernel's side calls on the slots themselves: nothing is copied into its process
    assert values[0].data_ptr() == kernel.inputs[0].data_ptr()
    kernel.close()
    judge.close()


def test_slots_are_aligned_and_never_overlap() -> None:
    layout = plan([torch.zeros(3), torch.zeros(5, dtype=torch.float16)], [torch.zeros(7)], "host")
    slots = [*layout.inputs, *layout.outputs]
    assert all(s.offset % 512 == 0 for s in slots)
    ends = [s.offset + s.nbytes for s in slots]
    assert all(end <= nxt.offset for end, nxt in zip(ends, slots[1:]))


def test_a_value_that_cannot_cross_is_named() -> None:
    with pytest.raises(ArenaError, match="object"):
        plan([object()], [], "host")


def test_a_layout_that_does_not_match_its_memory_is_refused() -> None:
    judge = Arena.create(plan([torch.zeros(4)], [], "host"), "cpu")
    bigger = judge.layout.model_copy(update={"size": judge.layout.size * 4})
    with pytest.raises(ArenaError, match="smaller"):
        Arena.attach(bigger, os.dup(judge.fd), "cpu")
    judge.close()


def test_device_memory_sent_to_a_process_without_a_gpu_is_refused() -> None:
    judge = Arena.create(plan([torch.zeros(4)], [], "host"), "cpu")
    on_gpu = judge.layout.model_copy(update={"where": "device"})
    with pytest.raises(ArenaError, match="without a GPU"):
        Arena.attach(on_gpu, os.dup(judge.fd), "cpu")
    judge.close()


def test_the_hand_over_words_come_before_the_first_slot() -> None:
    from harness.handover import DONE, GO

    arena = Arena.create(plan([torch.ones(8)], [torch.zeros(5)], "host"), "cpu")
    assert min(arena.layout.inputs[0].offset, arena.layout.outputs[0].offset) >= CONTROL_BYTES
    assert max(GO, DONE) + 4 <= CONTROL_BYTES
    arena.close()


FLOAT8 = [torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz]


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float8_inputs_and_outputs_cross_bit_for_bit_and_a_changed_input_shows(
        dtype: torch.dtype) -> None:
    x = torch.randn(5, 7).to(dtype)
    layout = plan([x], [torch.zeros(3, dtype=dtype)], "host")
    name = str(dtype).removeprefix("torch.")
    assert [s.dtype for s in (*layout.inputs, *layout.outputs)] == [name, name]
    assert layout.inputs[0].nbytes == 35 and layout.outputs[0].nbytes == 3
    judge = Arena.create(layout, "cpu")
    kernel = attached(judge)
    judge.inputs[0].copy_(x)
    (seen,) = kernel.values()
    assert seen.dtype == dtype and seen.shape == x.shape
    assert torch.equal(seen.view(torch.uint8), x.view(torch.uint8))
    assert fingerprint(seen) == fingerprint(x)  # the judge's check that inputs are unchanged
    seen.view(torch.uint8)[0, 3] ^= 1
    assert fingerprint(judge.inputs[0]) != fingerprint(x)
    kernel.outputs[0].copy_(torch.tensor([1.0, -0.5, torch.finfo(dtype).max]))
    assert judge.outputs[0].dtype == dtype
    assert judge.outputs[0].float().tolist() == [1.0, -0.5, torch.finfo(dtype).max]
    kernel.close()
    judge.close()
