"""The framed channel between the server, zygotes and workers (shared.channel): frames with
descriptors arrive whole, and an end that goes away is ChannelClosed however it went."""

from __future__ import annotations

import os
import socket

import pytest

from shared.channel import HEADER, Channel, ChannelClosed, ProtocolError


def test_a_frame_arrives_with_its_descriptors() -> None:
    a, b = socket.socketpair()
    read, write = os.pipe()
    try:
        Channel(a).send({"op": "x", "n": [1, 2]}, [read])
        message, fds = Channel(b).recv()
        assert message == {"op": "x", "n": [1, 2]} and len(fds) == 1
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
        Channel(b).recv()
    b.close()


def test_an_end_that_died_with_a_message_unread_is_channel_closed() -> None:
    """The kernel answers a read with ECONNRESET when the peer closed with data it never read
    (a server killed while its zygote had just written to it): the reader must see the same
    ChannelClosed as for a clean close, not a traceback."""
    a, b = socket.socketpair()
    Channel(b).send({"spawned": 1})  # never read by a
    a.close()
    with pytest.raises(ChannelClosed):
        Channel(b).recv()
    b.close()


def test_a_frame_that_is_not_json_is_a_protocol_error() -> None:
    a, b = socket.socketpair()
    a.sendall(HEADER.pack(3, 0) + b"{x}")
    with pytest.raises(ProtocolError):
        Channel(b).recv()
    a.close()
    b.close()
