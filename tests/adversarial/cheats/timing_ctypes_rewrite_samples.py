"""Timing: rewrite the timer's recorded figures in place, in native memory, with ctypes.

Tries: the timer and the reply are out of reach by name (bound before user code), but the
figures themselves are Python floats in the kernel's process. At import the kernel installs a
profile hook on its thread (``sys.setprofile``) that watches for the timer's own functions
returning (``Timer.sample`` / ``CudaTimer.sample``, ``Timer._span``, ``CudaTimer.extras``);
as each returns, before its caller has read the value, it writes 30% of each figure over the
float object's value in place (``ctypes.memmove`` onto ``ob_fval``): the sample's
``event_ms``, a back-to-back round, the host intervals and the device-busy figure. No name,
attribute or object of the harness is replaced, so every check of the timer's state sees it
as bound, and the figures that leave the process all read 30% and agree.
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
import ctypes
import sys

_SCALE = 0.3
_FVAL = float.__basicsize__ - ctypes.sizeof(ctypes.c_double)  # offset of a float's value


def _rewrite(x):
    # only floats made at run time: a code object's constant (0.0) is left alone
    if type(x) is float and x > 0:
        ctypes.memmove(id(x) + _FVAL, ctypes.byref(ctypes.c_double(x * _SCALE)), 8)


def _hook():
    timer = sys.modules["harness.timer"]
    figures = {timer.Timer.sample.__code__, timer.Timer._span.__code__}
    cuda = getattr(timer, "CudaTimer", None)
    if cuda is not None:
        figures.add(cuda.sample.__code__)  # CudaTimer._span goes through sample
    reports = {cuda.extras.__code__} if cuda is not None else set()

    def profile(frame, event, arg):
        if event != "return" or arg is None:
            return
        code = frame.f_code
        if code in figures:
            _rewrite(arg[0] if type(arg) is tuple else arg)
        elif code in reports:
            for value in arg.host_sync_ms:
                _rewrite(value)
            _rewrite(arg.device_busy_ms)

    sys.setprofile(profile)


_hook()


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)
"""

CASE = Cheat(
    name="ctypes_rewrite_samples",
    family=Family.TIMING,
    technique="tampered_timer_state",
    tries="a profile hook catches the timer's functions returning and ctypes.memmove writes "
          "30% of each figure over the float in place",
    caught_by="the judge's clock outside the kernel's process",
    build=lambda target: matmul_compare(target, torch_kernel(SOURCE), n=_n(target)),
    honest=lambda target: matmul_compare(target, torch_kernel(MATMUL_HONEST), n=_n(target)),
)
