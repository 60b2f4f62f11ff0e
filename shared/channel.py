"""Typed messages between processes: JSON frames of :mod:`shared.protocol` models, with file
descriptors beside.

A frame is an 8-byte header (body length, number of descriptors) and a JSON body, sent on a
Unix stream socket; descriptors (an arena's memory, a socket) travel with the header as
``SCM_RIGHTS``. Both ends use blocking sockets: job processes are single-threaded, and the
server reads each channel in a thread of its own (see :mod:`orchestration.worker_pool`).

:meth:`Channel.send` takes a model, :meth:`Channel.recv` the union it expects and returns a
validated model: a frame that is not one (bad JSON, an unknown kind, a field out of range) is
a :class:`ProtocolError`. Everything a process sends after it has imported user code is data
from an untrusted process: its receiver checks it and believes nothing it says about itself.
"""

from __future__ import annotations

import array
import select
import socket
import struct
import time
from typing import TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

T = TypeVar("T")

HEADER = struct.Struct("<II")
MAX_BODY = 256 * 2**20  # a frame bigger than this is a protocol violation, not a result
MAX_FDS = 16


class ChannelClosed(EOFError):
    """The other end closed the channel (or died) before a whole frame arrived."""


class ProtocolError(ValueError):
    """The other end sent something that is not a frame of this protocol."""


class Channel:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        # Bound now: a worker creates its channel before any user code exists, and patching
        # pydantic or socket later must not change what it sends (see subprocess_worker.serve).
        self._dump = BaseModel.model_dump_json
        self._sendmsg = sock.sendmsg
        self._sendall = sock.sendall

    @classmethod
    def from_fd(cls, fd: int) -> Channel:
        return cls(socket.socket(fileno=fd))

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, message: BaseModel, fds: list[int] | tuple[int, ...] = ()) -> None:
        body = self._dump(message).encode()
        header = HEADER.pack(len(body), len(fds))
        if fds:
            ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
            sent = self._sendmsg([header], ancillary)
            if sent != len(header):
                self._sendall(header[sent:])
        else:
            self._sendall(header)
        self._sendall(body)

    def recv(self, expected: TypeAdapter[T]) -> tuple[T, list[int]]:
        """The next frame as a model of ``expected`` and the descriptors that came with it
        (the caller closes them)."""
        header, fds = self._recv_header()
        length, nfds = HEADER.unpack(header)
        if length > MAX_BODY or nfds != len(fds):
            for fd in fds:
                _close(fd)
            raise ProtocolError(f"bad frame header (length {length}, {nfds} descriptors)")
        try:
            body = self._recv_exactly(length)
            message = expected.validate_json(body)
        except ValidationError as exc:
            for fd in fds:
                _close(fd)
            raise ProtocolError(f"a frame that is not a message expected here: {_brief(exc)}") \
                from exc
        except BaseException:
            for fd in fds:
                _close(fd)
            raise
        return message, fds

    def _recv_header(self) -> tuple[bytes, list[int]]:
        fds: list[int] = []
        data = b""
        space = socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize)
        while len(data) < HEADER.size:
            try:
                chunk, ancdata, _flags, _addr = self.sock.recvmsg(HEADER.size - len(data), space)
            except ConnectionResetError as exc:  # it died with our last message unread
                for fd in fds:
                    _close(fd)
                raise ChannelClosed("the other end died") from exc
            for level, kind, payload in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    got = array.array("i")
                    got.frombytes(payload[: len(payload) - len(payload) % got.itemsize])
                    fds.extend(got)
            if not chunk:
                for fd in fds:
                    _close(fd)
                raise ChannelClosed("the channel closed")
            data += chunk
        return data, fds

    def _recv_exactly(self, n: int) -> bytes:
        parts = []
        while n:
            try:
                chunk = self.sock.recv(min(n, 1 << 20))
            except ConnectionResetError as exc:
                raise ChannelClosed("the other end died mid-frame") from exc
            if not chunk:
                raise ChannelClosed("the channel closed mid-frame")
            parts.append(chunk)
            n -= len(chunk)
        return b"".join(parts)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _brief(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return "invalid"
    where = ".".join(str(p) for p in errors[0]["loc"])
    return f"{where}: {errors[0]['msg']}"[:300]


def _close(fd: int) -> None:
    import os

    try:
        os.close(fd)
    except OSError:
        pass


# How long both ends of a pairing (on a GPU) poll for the next message before sleeping on it:
# longer than the judge's work between two calls of a timing run.
PAIR_SPIN_S = 0.05


def wait_readable(fds: list[int], spin_s: float, timeout_s: float | None = None) -> list[int]:
    """The descriptors of ``fds`` that are readable: polled without sleeping for up to
    ``spin_s`` seconds, then waited for (at most ``timeout_s`` in all; None: for ever; an
    empty list when none became readable). A process that sleeps in the kernel while it waits
    wakes up late, by an amount that depends on how long it slept (a core's idle state).
    Polling while calls come quickly keeps both ends of a pairing awake."""
    started = time.monotonic()
    deadline = started + min(spin_s, timeout_s if timeout_s is not None else spin_s)
    while True:
        readable, _, _ = select.select(fds, [], [], 0)
        if readable:
            return readable
        if time.monotonic() >= deadline:
            left = None if timeout_s is None else max(0.0, started + timeout_s - time.monotonic())
            readable, _, _ = select.select(fds, [], [], left)
            return readable
