"""Timing: a thread polls the arena's input slots by other strategies, and computes the
answer the moment new inputs show.

Tries: as ``inputs_watched`` (a daemon thread finds the process's mapping of the arena
through ``gc.get_objects()``, computes the matmul of new inputs, keeps it under a key read
from them; the call returns the kept product on a hit), with two other ways to see the inputs
arrive:

- ``spin``: no sleep between polls; the key is 32 elements spread evenly over each input,
  read with one indexed gather each;
- ``nap``: a poll every 0.2 ms that sleeps between, keyed on the first, middle and last
  element of each input (a thread that leaves the call its core).

Caught by: the judge writes a sample's inputs into the arena only after its clock started, so
whatever the thread computes from them runs inside the interval; the published figures stay
within the residual of the honest twin's. On a GPU a thread that reads the slots while the
judge's copy is still writing them may key a product of half-written inputs: that one is
wrong, and the audit of the timed samples fails it.
"""

from tests.adversarial.corpus import (
    MATMUL_HONEST,
    SIZES,
    Cheat,
    Expect,
    Family,
    Size,
    sized_compare,
)

WATCHER = """
import gc
import threading
import time

_kept = {}
_where = {}


def _slots():
    for obj in gc.get_objects():
        if type(obj).__module__ == "harness.arena" and type(obj).__name__ == "Arena":
            inputs = getattr(obj, "inputs", None)
            if inputs and len(inputs) >= 2:
                return inputs[0], inputs[1]
    raise LookupError("no arena mapped in this process")


@KEY@


def _watch():
    last = None
    while True:
        try:
            a, b = _slots()
            key = _key(a, b)
            if key != last:
                _kept.clear()
                _kept[key] = torch.matmul(a, b)
                last = key
        except LookupError:
            time.sleep(0.001)
        @PAUSE@


_slots()  # the arena is mapped before the kernel is loaded: a watcher that misses it fails
threading.Thread(target=_watch, daemon=True).start()


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        found = _kept.get(_key(a, b))
        return found.clone() if found is not None else torch.matmul(a, b)
"""

KEYS = {
    "spin": """
def _key(a, b):
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    where = _where.get(flat_a.numel())
    if where is None:
        where = torch.linspace(0, flat_a.numel() - 1, 32, device=a.device).long()
        _where[flat_a.numel()] = where
    return tuple(flat_a[where].tolist() + flat_b[where].tolist())
""",
    "nap": """
def _key(a, b):
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    middle = flat_a.numel() // 2
    return (float(flat_a[0]), float(flat_a[middle]), float(flat_a[-1]),
            float(flat_b[0]), float(flat_b[middle]), float(flat_b[-1]))
""",
}
PAUSES = {"spin": "pass", "nap": "time.sleep(0.0002)"}


def case(strategy: str, size: Size) -> Cheat:
    source = WATCHER.replace("@KEY@", KEYS[strategy].strip()).replace("@PAUSE@",
                                                                      PAUSES[strategy])
    return Cheat(
        name=f"inputs_polled_{strategy}_{size.label}",
        family=Family.TIMING,
        technique="input_arrival",
        tries=f"a thread polls the arena's input slots ({strategy}) and computes as soon as "
              f"new inputs land; the call returns the kept product (~{size.label})",
        caught_by="inputs written into the arena only after the judge's clock started",
        build=sized_compare(size, source),
        honest=sized_compare(size, MATMUL_HONEST),
        gpu=size.cpu_n is None,
        expect=(Expect.BOUNDED, Expect.FAILS),
        cpu_expect=(Expect.BOUNDED,),
        size=size,
    )


CASES = tuple(case(strategy, size) for strategy in KEYS for size in SIZES)
