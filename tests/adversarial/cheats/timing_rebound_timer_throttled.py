"""Timing: rebind the bound timer to 60%, a gain well under any review threshold.

Tries: as ``rebound_timer_primitives``, but modestly: every in-process figure reads 60% of the
truth (a 1.7x speedup from nothing, where a reviewer would never look).
Caught by: the judge's clock outside the kernel's process: its figure is the one published,
so the speedup is the honest one.
"""

from tests.adversarial.cheats.timing_rebound_timer import REBIND, _n
from tests.adversarial.corpus import (
    MATMUL_HONEST,
    Cheat,
    Family,
    matmul_compare,
    torch_kernel,
)

SOURCE = REBIND.replace("@SCALE@", "0.6") + """

class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)
"""

CASE = Cheat(
    name="rebound_timer_throttled",
    family=Family.TIMING,
    technique="tampered_timer_state",
    tries="scales the bound timer's clocks to 60% (a quiet 1.7x)",
    caught_by="the judge's clock outside the kernel's process",
    honest_fraction=0.85,
    build=lambda target: matmul_compare(target, torch_kernel(SOURCE), n=_n(target)),
    honest=lambda target: matmul_compare(target, torch_kernel(MATMUL_HONEST), n=_n(target)),
)
