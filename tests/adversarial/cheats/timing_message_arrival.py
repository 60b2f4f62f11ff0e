"""Timing: start the work the moment the judge's ``Call`` reaches the kernel's process.

Tries: on a GPU the judge asks for a sample's call before its clock starts (its stream is held
behind a gate that opens once the kernel's process says its part is enqueued). The kernel
rebinds ``KernelSession.handed_over`` so that, for a timed sample, it enqueues the matmul of
the arena's input slots at once, before the hand-over's wait for the judge's signal; the call
itself then returns that product without computing. Had the inputs been in the arena when
the message arrived, the work would run before the clock.
Caught by: the judge writes a sample's inputs into the arena only after its clock started. On
a GPU the early product is of the last sample's inputs, and the audit of the timed samples
finds it wrong. On the CPU the judge writes the inputs before it sends the message, inside
its interval, so the early start is the honest call and its figure stays within the residual.
"""

from tests.adversarial.cheats.hooks import SEES_CALLS
from tests.adversarial.corpus import (
    MATMUL_HONEST,
    SIZES,
    Cheat,
    Expect,
    Family,
    Size,
    audit_caught,
    sized_compare,
)

SOURCE = SEES_CALLS + """
_early = [None]


def _start_on_arrival():
    kernel = _session.KernelSession
    handed_over = kernel.handed_over  # SEES_CALLS' wrapper

    def early(self, message, arena):
        if message.purpose == _SAMPLE:
            _early[0] = torch.matmul(arena.inputs[0], arena.inputs[1])  # before the wait
        return handed_over(self, message, arena)

    kernel.handed_over = early


_start_on_arrival()


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        found, _early[0] = _early[0], None
        return found if found is not None else torch.matmul(a, b)
"""


def case(size: Size) -> Cheat:
    return Cheat(
        name=f"message_arrival_{size.label}",
        family=Family.TIMING,
        technique="message_arrival",
        tries=f"enqueues the matmul of the arena's slots when the Call arrives, before the "
              f"hand-over's wait (~{size.label})",
        caught_by="inputs written into the arena only after the judge's clock started: the "
                  "early product is of the last sample's inputs (audit); on the CPU the "
                  "message follows the inputs",
        build=sized_compare(size, SOURCE),
        honest=sized_compare(size, MATMUL_HONEST),
        gpu=size.cpu_n is None,
        expect=(Expect.FAILS,),
        cpu_expect=(Expect.BOUNDED,),
        check=audit_caught,
        size=size,
    )


CASES = tuple(case(size) for size in SIZES)
