"""Timing: a thread watches the shared memory the inputs arrive in and computes the answer the
moment they land, so the call itself only hands over a finished result.

Tries: at import the kernel starts a daemon thread that finds its process's mapping of the
arena through ``gc.get_objects()`` and polls its input slots; whenever their content changes
it computes the matmul of what it sees and keeps the result under a key read from the
inputs. The call looks its inputs up by that key and returns the kept result where it finds
one, computing only on a miss: if the inputs were readable before the judge's clock started,
the work would fall outside the interval.
Caught by: the judge writes a sample's inputs into the arena only after its clock started:
whatever the thread computes from them runs inside the interval, so the published figure is
the work's.
"""

from tests.adversarial.cheats.timing_rebound_timer import _n
from tests.adversarial.corpus import MATMUL_HONEST, Cheat, Family, matmul_compare, torch_kernel

SOURCE = """
import gc
import threading
import time

_kept = {}


def _key(a, b):
    return (float(a[0, 0]), float(a[-1, -1]), float(b[0, 0]), float(b[-1, -1]))


def _slots():
    for obj in gc.get_objects():
        if type(obj).__module__ == "harness.arena" and type(obj).__name__ == "Arena":
            inputs = getattr(obj, "inputs", None)
            if inputs and len(inputs) >= 2:
                return inputs[0], inputs[1]
    return None


def _watch():
    last = None
    while True:
        slots = _slots()
        if slots is None:
            time.sleep(0.001)
            continue
        a, b = slots
        try:
            key = _key(a, b)
            if key != last:
                _kept.clear()
                _kept[key] = torch.matmul(a, b)
                last = key
        except Exception:
            time.sleep(0.001)


threading.Thread(target=_watch, daemon=True).start()


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        found = _kept.get(_key(a, b))
        return found.clone() if found is not None else torch.matmul(a, b)
"""

CASE = Cheat(
    name="inputs_watched",
    family=Family.TIMING,
    technique="early_start",
    tries="a thread polls the arena's input slots and computes the answer as soon as new "
          "inputs land; the call returns the kept result",
    caught_by="inputs written into the arena only after the judge's clock started",
    build=lambda target: matmul_compare(target, torch_kernel(SOURCE), n=_n(target)),
    honest=lambda target: matmul_compare(target, torch_kernel(MATMUL_HONEST), n=_n(target)),
    honest_fraction=0.7,
)
