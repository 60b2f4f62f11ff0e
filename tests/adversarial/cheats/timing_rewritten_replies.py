"""Timing: rewrite every timing figure in the kernel's process's replies on their way out.

Tries: the serving loop binds its own channel before user code, but the pair channel's
``send`` is looked up on its class at each reply, and every ``Channel`` serialises through a
``_dump`` it keeps as an attribute of the instance. The kernel rewrites what leaves: every
millisecond figure of a ``WarmedUp`` or ``ExtraFigures`` reply scaled to a quarter (each
sample the process reports, its back-to-back and graph figures, its warm-up), with a reason
string that marks the reply as rewritten. Variants:

- ``channel_class``: ``shared.channel.Channel.send`` replaced on the class (the models
  rewritten before they are serialised);
- ``channel_wire``: each ``Channel`` instance found through ``gc`` gets a ``_dump`` that
  rewrites the JSON after serialisation (what the judge parses);
- ``ctypes_in_place``: nothing of the harness rebound: a profile hook (``sys.setprofile``)
  sees ``KernelSession``'s ``Extras`` handler return and writes a quarter of each figure over
  the reply's float objects in place (``ctypes.memmove`` onto their values), before the reply
  is serialised.

Caught by: nothing the kernel's process says is a figure: the judge's clock makes every
published one, and the process's own figures are shown under ``kernel_reported`` and used for
nothing. The rewritten reply reaches the server (its mark shows under ``kernel_reported``);
the published figures stay within the residual of the honest twin's.
"""

from typing import Any

from tests.adversarial.corpus import (
    MATMUL_HONEST,
    SIZES,
    Cheat,
    Expect,
    Family,
    Size,
    sized_compare,
    timing_figures,
)

MARK = "rewritten on the way out"

REWRITE = """
import gc
import json
import sys

_SCALE = 0.25
_MARK = "@MARK@"
_KINDS = ("warmed_up", "extra_figures")


def _scaled(name, value):
    if name.endswith("_ms") or name == "ms":
        if isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool)):
            return value * _SCALE
        if isinstance(value, list):
            return [v * _SCALE for v in value]
    return value


def _rewrite(fields):
    out = {k: _scaled(k, v) for k, v in fields.items()}
    if "report" in out and isinstance(out["report"], dict):
        report = _rewrite(out["report"])
        report["back_to_back_reason"] = report["graph_reason"] = _MARK
        out["report"] = report
    return out
""".replace("@MARK@", MARK)

SOURCES = {
    "channel_class": REWRITE + """

def _patch():
    channel = sys.modules["shared.channel"].Channel
    send = channel.send

    def rewriting(self, message, fds=()):
        if getattr(message, "kind", None) in _KINDS:
            message = type(message).model_validate(_rewrite(message.model_dump()))
        return send(self, message, fds)

    channel.send = rewriting


_patch()
""",
    "channel_wire": REWRITE + """

def _patch():
    channel = sys.modules["shared.channel"].Channel
    found = [obj for obj in gc.get_objects() if type(obj) is channel]
    if not found:
        raise LookupError("no channel to rewrite")
    for obj in found:
        def dump(message, real=obj._dump):
            text = real(message)
            fields = json.loads(text)
            if fields.get("kind") not in _KINDS:
                return text
            return json.dumps(_rewrite(fields))

        obj._dump = dump


_patch()
""",
    "ctypes_in_place": REWRITE + """
import ctypes

_FVAL = float.__basicsize__ - ctypes.sizeof(ctypes.c_double)  # offset of a float's value


def _in_place(x):
    if type(x) is float and x > 0:  # a constant such as 0.0 is shared: left alone
        ctypes.memmove(id(x) + _FVAL, ctypes.byref(ctypes.c_double(x * _SCALE)), 8)


def _hook():
    session = sys.modules["kernel_side.session"]
    extras = session.KernelSession.HANDLERS[session.Extras].__code__

    def profile(frame, event, arg):
        if event != "return" or frame.f_code is not extras:
            return
        report = getattr(arg, "report", None)
        if report is None:
            return
        for name in ("back_to_back_ms", "graph_ms_per_call", "device_busy_ms"):
            _in_place(getattr(report, name))
        for name in ("host_sync_ms", "back_to_back_round_ms", "graph_replay_ms", "event_ms"):
            for value in getattr(report, name):
                _in_place(value)
        report.back_to_back_reason = report.graph_reason = _MARK

    sys.setprofile(profile)


_hook()
""",
}
BODY = """

class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)
"""


def rewrite_reached_the_server(body: dict[str, Any], twin: dict[str, Any]) -> str | None:
    """The rewritten reply reached the server (its mark under kernel_reported)."""
    own = timing_figures(body).get("kernel_reported") or {}
    if own.get("back_to_back_reason") != MARK:
        return f"no rewritten reply reached the server, so the attack did not run: {own}"
    return None


def case(variant: str, size: Size) -> Cheat:
    return Cheat(
        name=f"rewritten_replies_{variant}_{size.label}",
        family=Family.TIMING,
        technique="figures_rewritten",
        tries=f"{variant}: every figure of the kernel's process's replies scaled to 25% on "
              f"the way out (~{size.label})",
        caught_by="the judge's clock makes every published figure; the process's own are "
                  "shown under kernel_reported",
        build=sized_compare(size, SOURCES[variant] + BODY, full_run=True),
        honest=sized_compare(size, MATMUL_HONEST, full_run=True),
        gpu=size.cpu_n is None,
        expect=(Expect.BOUNDED,),
        check=rewrite_reached_the_server,
        size=size,
    )


CASES = tuple(case(variant, size) for variant in SOURCES for size in SIZES)
