"""Timing: leave the timer alone and rewrite its report on the way out of the worker.

Tries: a timer bound before user code cannot be patched, but its raw samples still leave
the kernel's process through Python code that runs after the kernel was imported. The kernel
wraps the ``send`` method of every class in the server's loaded modules (the worker's
channel) so that every outgoing message has its timing samples (``event_ms``,
``host_sync_ms``, ``device_busy_ms``, ``warmup_ms``, …) scaled to a quarter: a consistent
forgery (every independent measure shrinks alike) and a modest one (4x stays below the 10x
speedup review).
Caught by: timings the kernel's process cannot rewrite: measured by a process that never
imported user code, or cross-checked against the server's own clock of the timing call
(the wall time of the call must cover the samples reported).
"""

from tests.adversarial.corpus import Cheat, Family, matmul_cheat, matmul_honest

SOURCE = """
import inspect
import sys

SCALE = 0.25
TIMING_KEYS = ("event_ms", "host_sync_ms", "device_busy_ms", "warmup_ms", "samples",
               "samples_ms", "times_ms", "elapsed_ms", "median", "mean", "min", "max")
PACKAGES = ("shared", "orchestration", "subprocess_worker", "profiling", "worker", "compilation")


def _scaled(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value * SCALE
    if isinstance(value, list):
        return [_scaled(v) for v in value]
    return value


def _forge(message):
    if isinstance(message, dict):
        return {k: _scaled(v) if k in TIMING_KEYS else _forge(v) for k, v in message.items()}
    if isinstance(message, list):
        return [_forge(v) for v in message]
    return message


def _wrap(send):
    def forging_send(self, message, *args, **kwargs):
        return send(self, _forge(message), *args, **kwargs)
    forging_send.__forging__ = True
    return forging_send


wrapped = []
for _name, _module in list(sys.modules.items()):
    if _module is None or _name.split(".")[0] not in PACKAGES:
        continue
    for _cls in list(vars(_module).values()):
        if not inspect.isclass(_cls) or _cls.__module__ != _name:
            continue
        send = _cls.__dict__.get("send")
        if inspect.isfunction(send) and not getattr(send, "__forging__", False):
            setattr(_cls, "send", _wrap(send))
            wrapped.append(f"{_name}.{_cls.__name__}.send")
print("forging timing reports through:", ", ".join(wrapped) or "nothing found")


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)
"""

CASE = Cheat(
    name="forged_timing_report",
    family=Family.TIMING,
    technique="forged_result",
    tries="wraps the worker channel's send() to scale every timing sample it reports to 25%",
    caught_by="timing the kernel's process cannot rewrite, or the server's own clock around it",
    build=matmul_cheat(SOURCE),
    honest=matmul_honest,
)
