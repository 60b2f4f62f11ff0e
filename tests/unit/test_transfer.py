"""Tensors between worker processes: memory files on the host, layouts checked on arrival."""

from __future__ import annotations

import fcntl
import os

import pytest
import torch

from validation import transfer


def _roundtrip(values: list, **kwargs) -> list:
    description, layout, fd = transfer.export(values, **kwargs)
    try:
        return transfer.load(description, layout, fd, "cpu")
    finally:
        os.close(fd)


def test_values_of_every_kind_come_back_equal() -> None:
    x = torch.randn(3, 5)
    values = [x, 3, 2.5, None, "s", (torch.arange(4), [True, torch.zeros(0)]), torch.float16,
              torch.tensor(True), torch.randn(4, 6).t()]
    got = _roundtrip(values)
    assert torch.equal(got[0], x)
    assert got[1:5] == [3, 2.5, None, "s"]
    assert isinstance(got[5], tuple) and torch.equal(got[5][0], torch.arange(4))
    assert got[5][1][0] is True and got[5][1][1].shape == (0,)
    assert got[6] is torch.float16
    assert got[7].dtype == torch.bool and bool(got[7])
    assert torch.equal(got[8], values[8])  # non-contiguous in, same values out


def test_cpu_tensors_cross_through_a_sealed_file_even_when_asked_for_the_gpu() -> None:
    _, layout, fd = transfer.export([torch.ones(8)], on_device=True)
    try:
        assert not transfer.on_device(layout)
        assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_WRITE
    finally:
        os.close(fd)


def test_an_unsealed_file_is_refused_where_a_sealed_one_is_expected() -> None:
    description, layout, fd = transfer.export([torch.ones(4)])
    plain = os.memfd_create("plain")
    try:
        os.write(plain, os.pread(fd, 64, 0))
        with pytest.raises(transfer.TransferError, match="not sealed"):
            transfer.load(description, layout, plain, "cpu")
        assert torch.equal(transfer.load(description, layout, plain, "cpu",
                                         expect_sealed=False)[0], torch.ones(4))
    finally:
        os.close(fd)
        os.close(plain)


@pytest.mark.parametrize("lie", [
    {"nbytes": 8},                 # fewer bytes than the shape needs
    {"offset": 1 << 20},           # outside the file
    {"dtype": "object"},           # not a tensor dtype
    {"offset": -64},
])
def test_a_layout_that_does_not_fit_its_file_is_refused(lie: dict) -> None:
    description, layout, fd = transfer.export([torch.ones(16)])
    try:
        with pytest.raises(transfer.TransferError):
            transfer.load(description, [{**layout[0], **lie}], fd, "cpu")
    finally:
        os.close(fd)


def test_a_layout_mixing_host_and_device_is_refused() -> None:
    layout = [{"dtype": "float32", "shape": [1], "offset": 0, "nbytes": 4, "where": "device"},
              {"dtype": "float32", "shape": [1], "offset": 64, "nbytes": 4}]
    with pytest.raises(transfer.TransferError, match="mixes"):
        transfer.on_device(layout)
    assert transfer.on_device(layout[:1]) and not transfer.on_device(layout[1:])


def test_gpu_memory_sent_to_a_process_without_a_gpu_is_refused() -> None:
    layout = [{"dtype": "float32", "shape": [1], "offset": 0, "nbytes": 4, "where": "device"}]
    fd = os.memfd_create("not-gpu-memory")
    try:
        with pytest.raises(transfer.TransferError, match="without a GPU"):
            transfer.load([{"tensor": 0}], layout, fd, "cpu")
    finally:
        os.close(fd)


def test_an_unsupported_value_names_its_type() -> None:
    with pytest.raises(transfer.TransferError, match="set"):
        transfer.export([{1, 2}])


def test_tensors_that_do_not_fit_the_device_are_a_transfer_error_naming_their_bytes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    description, layout, fd = transfer.export([torch.ones(16)])

    def out_of_memory(*_: object) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 B")

    monkeypatch.setattr(transfer, "read_tensor", out_of_memory)
    try:
        with pytest.raises(transfer.TransferError, match="64 bytes of tensors do not fit"):
            transfer.load(description, layout, fd, "cpu")
    finally:
        os.close(fd)
