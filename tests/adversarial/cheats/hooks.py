"""Kernel source that the cheats reaching into ``kernel_side`` share (not a case of its own).

A kernel imported into the kernel's process can find the session that serves the judge in
``sys.modules`` and rebind what it looks up at call time: ``KernelSession``'s methods and its
``HANDLERS`` table. ``SEES_CALLS`` does so without changing any answer: it records the
purpose of the call being handed over (a timed sample, the harness's null call, or none for
trials and the warm-up), counts the timed samples of the current reading, and counts the
readings (each begins with the judge's ``WarmUp``). It raises at import where the session
is not found, so a cheat whose hook misses fails loudly instead of passing as honest work.
"""

SEES_CALLS = """
import sys

_session = sys.modules["kernel_side.session"]
_SAMPLE = _session.CallPurpose.SAMPLE
_NULL = _session.CallPurpose.CALIBRATE
_seen = {"purpose": None, "samples": 0, "readings": 0}


def _see_calls():
    kernel = _session.KernelSession
    handed_over = kernel.handed_over
    warm_up = kernel.HANDLERS[_session.WarmUp]

    def watched(self, message, arena):
        _seen["purpose"] = message.purpose
        if message.purpose == _SAMPLE:
            _seen["samples"] += 1
        try:
            return handed_over(self, message, arena)
        finally:
            _seen["purpose"] = None

    def counted(self, message, fds):
        _seen["readings"] += 1
        _seen["samples"] = 0
        return warm_up(self, message, fds)

    kernel.handed_over = watched
    kernel.HANDLERS[_session.WarmUp] = counted


_see_calls()


def _timed():
    return _seen["purpose"] == _SAMPLE
"""

# Work done inside the harness's null call only: KernelSession.copied_out runs inside the
# hand-over (after the wait for the judge's signal, before the signal back), for a sample as
# for a null call; ``_null_work(arena)``, which the cheat defines, runs there for null calls.
SLOWS_NULL_CALLS = """

def _slow_null_calls():
    kernel = _session.KernelSession
    copied_out = kernel.copied_out

    def slowed(self, index, outputs):
        if _seen["purpose"] == _NULL:
            _null_work(self.arena)
        return copied_out(self, index, outputs)

    kernel.copied_out = slowed


_slow_null_calls()
"""
