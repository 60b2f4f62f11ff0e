"""The framed channel between the server, zygotes and workers (shared.channel): frames with
descriptors arrive whole, and an end that goes away is ChannelClosed however it went."""

from __future__ import annotations

import os
import socket

import pytest

from shared.channel import HEADER, Channel, ChannelClosed, ProtocolError
from shared.protocol import REPLIES, SERVER_REQUESTS, Done, Spawned, Trials


def test_a_frame_arrives_with_its_descriptors() -> None:
    a, b = socket.socketpair()
    read, write = os.pipe()
    try:
        Channel(a).send(Trials(first=1, count=2), [read])
        message, fds = Channel(b).recv(SERVER_REQUESTS)
        assert message == Trials(first=1, count=2) and len(fds) == 1
        os.write(write, b"ok")
        assert os.read(fds[0], 2) == b"ok"  # the same pipe, passed over the socket
        os.close(fds[0])
    finally:
        for fd in (read, write):
            os.close(fd)
        a.close()
        b.close()


def test_an_end_closed_cleanly_is_channel_closed() -> None:
    a, b = socket.socketpair()
    a.close()
    with pytest.raises(ChannelClosed):
        Channel(b).recv(REPLIES)
    b.close()


def test_an_end_that_died_with_a_message_unread_is_channel_closed() -> None:
    """The kernel answers a read with ECONNRESET when the peer closed with data it never read
    (a server killed while its zygote had just written to it): the reader must see the same
    ChannelClosed as for a clean close, not a traceback."""
    a, b = socket.socketpair()
    Channel(b).send(Spawned(outer_pid=1))  # never read by a
    a.close()
    with pytest.raises(ChannelClosed):
        Channel(b).recv(REPLIES)
    b.close()


def test_a_frame_that_is_not_json_is_a_protocol_error() -> None:
    a, b = socket.socketpair()
    a.sendall(HEADER.pack(3, 0) + b"{x}")
    with pytest.raises(ProtocolError):
        Channel(b).recv(REPLIES)
    a.close()
    b.close()


@pytest.mark.parametrize("frame", [
    b'{"kind": "done", "extra": 1}',  # a key the model does not have
    b'{"kind": "a verdict of my own"}',  # an unknown kind
    b'{"op": "trials", "first": -1, "count": 1}',  # a request where a reply is due
])
def test_a_frame_that_is_not_a_message_expected_here_is_a_protocol_error(frame: bytes) -> None:
    """A process that imported user code may write anything to its channel: only a model of
    the kind the receiver expects gets through, and its descriptors are closed with it."""
    a, b = socket.socketpair()
    read, write = os.pipe()
    a.sendmsg([HEADER.pack(len(frame), 1)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                              read.to_bytes(4, "little"))])
    a.sendall(frame)
    with pytest.raises(ProtocolError):
        Channel(b).recv(REPLIES)
    os.close(read)
    os.close(write)
    a.close()
    b.close()


def test_a_reply_of_the_expected_kind_passes() -> None:
    a, b = socket.socketpair()
    Channel(a).send(Done())
    assert Channel(b).recv(REPLIES) == (Done(), [])
    a.close()
    b.close()
