"""The judge's end of the pair channel: requests to the kernel's process, replies checked.

Whatever comes back was sent by a process that may run the kernel's code, so it is data: a
reply of the wrong kind, or for another call, ends the pairing as a protocol violation
(:class:`PartnerLost`), and a :class:`~shared.protocol.Failure` is the kernel's own failure
(:class:`PartnerFailure`), relayed to the server as such.
"""

from __future__ import annotations

import time
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


class CallOverran(Exception):
    """The kernel's process did not answer within the time it was given (its call is stuck,
    or ran longer than the timing's budget allows)."""


class Partner:
    def __init__(self, channel: Channel, spin_s: float = 0.0) -> None:
        self.channel = channel
        self.spin_s = spin_s  # how long to poll for a reply before sleeping on it

    def request(self, message: Message, expected: type[R], fds: list[int] | None = None,
                deadline: float | None = None) -> R:
        """Send ``message`` and return its reply; ``deadline`` (a ``perf_counter`` time):
        :class:`CallOverran` when none came by then."""
        self._send(message, fds or [])
        within = None if deadline is None else max(0.0, deadline - time.perf_counter())
        reply = self._receive(expected, within)
        if reply is None:
            raise CallOverran(f"no answer to {type(message).__name__} in time")
        return reply

    def ask(self, purpose: CallPurpose, index: int, seq: int = 0) -> None:
        """Ask for a call (its answer: :meth:`answer`)."""
        self._send(Call(purpose=purpose, index=index, seq=seq), [])

    def answer(self, index: int, within_s: float | None) -> CallDone | None:
        """The answer to call ``index``, or None if none came within ``within_s``."""
        done = self._receive(CallDone, within_s)
        if done is not None and done.index != index:
            raise PartnerLost("it broke the protocol",
                              f"answered call {done.index} where call {index} was due")
        return done

    def call(self, purpose: CallPurpose, index: int) -> CallDone:
        """A call answered once it ran (a correctness trial)."""
        self.ask(purpose, index)
        done = self.answer(index, None)
        assert done is not None
        return done

    def map_arena(self, message: MapArena, fd: int) -> None:
        from shared.protocol import ArenaMapped

        self.request(message, ArenaMapped, [fd])

    def warm_up(self, quick: bool = False, deadline: float | None = None,
                cores: list[int] | None = None, shares_cores: bool = False) -> WarmedUp:
        return self.request(WarmUp(quick=quick, cores=cores, shares_cores=shares_cores),
                            WarmedUp, deadline=deadline)

    def extras(self, message: Extras, deadline: float | None = None) -> ExtraFigures:
        return self.request(message, ExtraFigures, deadline=deadline)

    def _send(self, message: Message, fds: list[int]) -> None:
        try:
            self.channel.send(message, fds)
        except OSError as exc:
            raise PartnerLost(f"its channel closed ({exc})") from exc

    def _receive(self, expected: type[R], within_s: float | None) -> R | None:
        try:
            waits = self.spin_s > 0 or within_s is not None
            if waits and not wait_readable([self.channel.fileno()], self.spin_s, within_s):
                return None
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
