"""Timing: a background thread that tampers with the timer only once timing has begun.

Tries: at import the kernel changes nothing: it starts a daemon thread that finds the bound
timer through ``gc.get_objects()`` (reading only) and waits. Once the kernel has been called
more times than there are correctness trials (the judge's warm-up has begun), the thread
rebinds the timer's clock primitives as ``rebound_timer_primitives`` does (the host clock and
the CUDA-event ``elapsed_time`` read 30% of each interval), and from then on checks them every
millisecond between samples and rebinds them again if anything put them back. A check of the
timer's state at load time, or after the correctness trials, sees the harness's own
primitives.
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

CORRECT_TRIALS = 2

SOURCE = """
import gc
import threading
import time

_SCALE = 0.3
_AFTER = @AFTER@  # calls: the correctness trials
_calls = [0]


def _timers():
    return [obj for obj in gc.get_objects()
            if type(obj).__module__ == "harness.timer"
            and type(obj).__name__ in ("Timer", "CudaTimer")]


def _rebind(timer):
    if not getattr(timer._now, "_ours", False):
        real_now = timer._now
        origin = real_now()

        def now(real_now=real_now, origin=origin):
            return origin + int((real_now() - origin) * _SCALE)

        now._ours = True
        timer._now = now
    elapsed = getattr(timer, "_elapsed", None)
    if elapsed is not None and not getattr(elapsed, "_ours", False):
        def scaled(a, b, real=elapsed):
            return real(a, b) * _SCALE

        scaled._ours = True
        timer._elapsed = scaled


def _watch():
    timers = _timers()  # read only: nothing is changed yet
    while _calls[0] <= _AFTER:
        time.sleep(0.001)
    while True:  # between samples from now on: apply, and apply again if put back
        for timer in timers:
            _rebind(timer)
        time.sleep(0.001)


threading.Thread(target=_watch, daemon=True).start()


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        _calls[0] += 1
        return torch.matmul(a, b)
""".replace("@AFTER@", str(CORRECT_TRIALS))

CASE = Cheat(
    name="thread_between_samples",
    family=Family.TIMING,
    technique="tampered_timer_state",
    tries="a daemon thread started at import rebinds the timer's clocks to 30% only after "
          "the correctness trials, and keeps re-applying it between samples",
    caught_by="the judge's clock outside the kernel's process",
    build=lambda target: matmul_compare(target, torch_kernel(SOURCE), n=_n(target),
                                        correct_trials=CORRECT_TRIALS),
    honest=lambda target: matmul_compare(target, torch_kernel(MATMUL_HONEST), n=_n(target),
                                         correct_trials=CORRECT_TRIALS),
)
