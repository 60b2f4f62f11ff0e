"""Sealing a memory file survives the kernel's transient EBUSY (a page still referenced a
moment after its write), and fails, naming the cause, only when the file stays busy. In CI a
comparison once failed as the kernel's runtime error: 'OSError: [Errno 16] Device or resource
busy' from F_ADD_SEALS."""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator

import pytest

from shared import memfd


@pytest.fixture
def fd() -> Iterator[int]:
    fd = os.memfd_create("kes-test", os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
    os.write(fd, b"outputs")
    yield fd
    os.close(fd)


def busy_for(times: int, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """fcntl that answers EBUSY to the first ``times`` F_ADD_SEALS; returns the call log."""
    real = fcntl.fcntl
    calls: list[int] = []

    def fake(fd: int, cmd: int, arg: int = 0) -> int:
        if cmd == fcntl.F_ADD_SEALS:
            calls.append(cmd)
            if len(calls) <= times:
                raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))
        return real(fd, cmd, arg)

    monkeypatch.setattr(memfd.fcntl, "fcntl", fake)
    monkeypatch.setattr(memfd.time, "sleep", lambda s: None)
    return calls


def test_a_file_busy_for_a_moment_is_sealed_on_a_later_try(
        fd: int, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = busy_for(2, monkeypatch)
    memfd.seal(fd)
    assert len(calls) == 3
    assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_WRITE
    with pytest.raises(PermissionError):
        os.write(fd, b"changed")


def test_a_file_that_stays_busy_fails_with_the_kernels_reason(
        fd: int, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = busy_for(memfd.SEAL_TRIES, monkeypatch)
    with pytest.raises(OSError) as raised:
        memfd.seal(fd)
    assert raised.value.errno == errno.EBUSY and len(calls) == memfd.SEAL_TRIES
    assert not fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_WRITE
