"""Timing: slow down every Python clock of the worker four-fold.

Tries: ``time.perf_counter`` (the CPU-mode timer), ``perf_counter_ns``, ``monotonic``,
``time``, ``process_time`` and their ``_ns`` forms are replaced by clocks that advance at 25%
of real speed, so any host interval measured in the kernel's process shrinks four-fold
(below the 10x speedup review). On
a GPU the event figure is unaffected (then the number is honest and the case passes on that).
Caught by: measuring intervals outside the process that imported user code.
"""

from tests.adversarial.corpus import Cheat, Family, matmul_cheat, matmul_honest

SOURCE = """
import time as _time

_SCALE = 0.25


def _slowed(real, integer):
    origin = real()
    if integer:
        return lambda: origin + int((real() - origin) * _SCALE)
    return lambda: origin + (real() - origin) * _SCALE


for _name in ("perf_counter", "monotonic", "time", "process_time", "thread_time"):
    setattr(_time, _name, _slowed(getattr(_time, _name), False))
    setattr(_time, _name + "_ns", _slowed(getattr(_time, _name + "_ns"), True))


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)
"""

CASE = Cheat(
    name="patched_perf_counter",
    family=Family.TIMING,
    technique="patched_timer",
    tries="time.perf_counter & co. run at 25% speed inside the worker",
    caught_by="host intervals measured outside the kernel's process",
    build=matmul_cheat(SOURCE),
    honest=matmul_honest,
)
