"""Timing: rebind the in-process timer's bound primitives so every figure reads a quarter.

Tries: the harness binds its clock before user code (so patching ``time`` or
``torch.cuda.Event`` changes nothing); the kernel finds the bound timer itself through
``gc.get_objects()`` and replaces its primitives: the CUDA-event ``elapsed_time`` and the host
clock now report a quarter of each interval, so the events, the host intervals and every
figure beside them shrink alike and agree with each other.
Caught by: the judge's clock outside the kernel's process (from handing the inputs over to
holding the outputs): every published figure is that clock's, so the
kernel's own figures change nothing.
"""

from tests.adversarial.corpus import (
    MATMUL_HONEST,
    Cheat,
    Family,
    Target,
    matmul_compare,
    torch_kernel,
)

REBIND = """
import gc

_SCALE = @SCALE@


def _rebind():
    for obj in gc.get_objects():
        if type(obj).__module__ == "harness.timer" and type(obj).__name__ in ("Timer", "CudaTimer"):
            if hasattr(obj, "_elapsed"):
                real = obj._elapsed
                obj._elapsed = lambda a, b, real=real: real(a, b) * _SCALE
            real_now = obj._now
            origin = real_now()
            obj._now = lambda real_now=real_now, origin=origin: origin + int(
                (real_now() - origin) * _SCALE)


_rebind()
"""

SOURCE = REBIND.replace("@SCALE@", "0.25") + """

class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)
"""

def _n(target: Target) -> int:
    """Large enough on the CPU (about 15 ms a call) that the judge's clock, which holds there
    to within 1 ms and 30%, tells a rescaled clock from the work."""
    return target.matmul_n if target.gpu else 1024


CASE = Cheat(
    name="rebound_timer_primitives",
    family=Family.TIMING,
    technique="tampered_timer_state",
    tries="finds the bound timer through gc and scales its event and host clocks to 25%",
    caught_by="the judge's clock outside the kernel's process",
    build=lambda target: matmul_compare(target, torch_kernel(SOURCE), n=_n(target)),
    honest=lambda target: matmul_compare(target, torch_kernel(MATMUL_HONEST), n=_n(target)),
)
