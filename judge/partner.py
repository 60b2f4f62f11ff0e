"""The judge's end of the pair channel: requests to the kernel's process, replies checked.

Whatever comes back was sent by a process that may run the kernel's code, so it is data: a
reply of the wrong kind, or for another call, ends the pairing as a protocol violation
(:class:`PartnerLost`), and a :class:`~shared.protocol.Failure` is the kernel's own failure
(:class:`PartnerFailure`), relayed to the server as such.
"""

from __future__ import annotations

from typing import TypeVar

from shared.channel import Channel, ChannelClosed, ProtocolError, wait_readable
from shared.protocol import (
    REPLIES,
    Call,
    CallDone,
    CallPurpose,
    ExtraFigures,
    Extras,
    Failure,
    MapArena,
    Message,
    Unpair,
    WarmedUp,
    WarmUp,
)

R = TypeVar("R", bound=Message)


class PartnerFailure(Exception):
    """The kernel's process answered with its kernel's failure."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class PartnerLost(Exception):
    """The kernel's process is gone (the channel closed) or broke the protocol."""

    def __init__(self, reason: str, broke_protocol: str | None = None) -> None:
        super().__init__(reason)
        self.broke_protocol = broke_protocol


class Partner:
    def __init__(self, channel: Channel, spin_s: float = 0.0) -> None:
        self.channel = channel
        self.spin_s = spin_s  # how long to poll for a reply before sleeping on it

    def request(self, message: Message, expected: type[R], fds: list[int] | None = None) -> R:
        try:
            self.channel.send(message, fds or [])
            if self.spin_s > 0:
                wait_readable([self.channel.fileno()], self.spin_s)
            reply, extra = self.channel.recv(REPLIES)
        except ProtocolError as exc:
            raise PartnerLost("it broke the protocol", str(exc)) from exc
        except (ChannelClosed, OSError) as exc:
            raise PartnerLost(f"its channel closed ({exc})") from exc
        for fd in extra:
            _close(fd)
        if isinstance(reply, Failure):
            raise PartnerFailure(reply)
        if not isinstance(reply, expected):
            raise PartnerLost("it broke the protocol",
                              f"answered {type(reply).__name__} where {expected.__name__} was due")
        return reply

    def call(self, purpose: CallPurpose, index: int, hold_ms: float = 0.0) -> CallDone:
        done = self.request(Call(purpose=purpose, index=index, hold_ms=hold_ms), CallDone)
        if done.index != index:
            raise PartnerLost("it broke the protocol",
                              f"answered call {done.index} where call {index} was due")
        return done

    def map_arena(self, message: MapArena, fd: int) -> None:
        from shared.protocol import ArenaMapped

        self.request(message, ArenaMapped, [fd])

    def warm_up(self, quick: bool = False) -> WarmedUp:
        return self.request(WarmUp(quick=quick), WarmedUp)

    def extras(self, message: Extras) -> ExtraFigures:
        return self.request(message, ExtraFigures)

    def close(self) -> None:
        try:
            self.channel.send(Unpair())
        except OSError:
            pass
        self.channel.close()


def _close(fd: int) -> None:
    import os

    try:
        os.close(fd)
    except OSError:
        pass
