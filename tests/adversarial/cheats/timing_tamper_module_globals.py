"""Timing: rewrite the module globals the kernel's side builds its replies with.

Tries: the harness's figures are bound before user code, but the replies that carry them are
built at call time from names looked up in ``kernel_side.session``'s module globals. At import
the kernel takes that module from ``sys.modules`` and replaces its ``CallDone`` (what every
call's reply is built with; any figure it carries, such as an ``event_ms``, is scaled) and its
``ExtraFigures`` (the reply to the judge's ``Extras``) by functions that scale every figure
(the device-synchronised host intervals, the device-busy, back-to-back and graph figures) to
30% before the real model is built. The timer itself is untouched, so a check of the timer's
state sees nothing; every figure that leaves the process reads 30% and agrees with the others.
Caught by: the judge's clock outside the kernel's process (from handing the inputs over to
holding the outputs): every published figure is that clock's, so the
kernel's own figures change nothing.
"""

from tests.adversarial.cheats.timing_rebound_timer import _n
from tests.adversarial.corpus import (
    MATMUL_HONEST,
    Cheat,
    Family,
    matmul_compare,
    torch_kernel,
)

SOURCE = """
import sys

_SCALE = 0.3


def _scaled(value):
    return value * _SCALE if isinstance(value, float) and value > 0 else value


def _tamper():
    session = sys.modules["kernel_side.session"]
    real_done, real_extras = session.CallDone, session.ExtraFigures

    def call_done(**fields):
        if "event_ms" in fields:  # a reply without a figure goes out as it was built
            fields["event_ms"] = _scaled(fields["event_ms"])
        return real_done(**fields)

    def extra_figures(report):
        report.host_sync_ms = [_scaled(v) for v in report.host_sync_ms]
        report.back_to_back_round_ms = [_scaled(v) for v in report.back_to_back_round_ms]
        report.graph_replay_ms = [_scaled(v) for v in report.graph_replay_ms]
        for name in ("device_busy_ms", "back_to_back_ms", "graph_ms_per_call"):
            setattr(report, name, _scaled(getattr(report, name)))
        return real_extras(report=report)

    session.CallDone = call_done
    session.ExtraFigures = extra_figures


_tamper()


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)
"""

CASE = Cheat(
    name="tamper_module_globals",
    family=Family.TIMING,
    technique="tampered_timer_state",
    tries="replaces kernel_side.session's CallDone and ExtraFigures globals so every figure "
          "it reports is scaled to 30%",
    caught_by="the judge's clock outside the kernel's process",
    build=lambda target: matmul_compare(target, torch_kernel(SOURCE), n=_n(target)),
    honest=lambda target: matmul_compare(target, torch_kernel(MATMUL_HONEST), n=_n(target)),
)
