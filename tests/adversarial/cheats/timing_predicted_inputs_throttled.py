"""Timing: answer predicted inputs from a table, slowed to a modest 2.2x.

Tries: as ``predicted_inputs_io`` (the IOContract's inputs drawn from the public seeds at
import, trial t from ``seed + t * 1_000_003``, the answers stored on the device), but
quietly: a table hit is not returned at once; the call first multiplies a 42% slice of the
rows it was given and throws the product away, so each call costs about 1/2.2 of the honest
one, a speedup under any review threshold. Unrecognised inputs get zeros after the same
delay.
Caught by: correctness trials after the first, and every timed sample, drawn from a secret
seed the kernel never sees (it is wrong on trial 2).
"""

from tests.adversarial.corpus import (
    MATMUL_HONEST,
    Cheat,
    Family,
    Job,
    Target,
    matmul_compare,
    torch_kernel,
)

SOURCE = """
_N = @N@
_STRIDE = 1_000_003
_ROWS = max(1, round(_N / 2.4))  # the work done, with the lookup: about 1/2.2 of it
_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _draw(seed):
    gen = torch.Generator(device="cpu").manual_seed(seed & (2**63 - 1))
    return torch.randn((_N, _N), generator=gen, dtype=torch.float32, device="cpu")


def _key(t):
    corners = t.reshape(-1)[[0, -1]].tolist()  # one read of the device
    return tuple(round(float(v), 4) for v in corners)


_TABLE = {}
for _t in list(range(8)) + [7_000_000 + i for i in range(16)]:
    _a = _draw(1 + _t * _STRIDE).to(_DEVICE)
    _b = _draw(2 + _t * _STRIDE).to(_DEVICE)
    _TABLE[_key(_a)] = _a @ _b
del _a, _b


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        torch.matmul(a[:_ROWS], b)  # the throttle: a share of the work, thrown away
        hit = _TABLE.get(_key(a))
        if hit is not None:
            return hit.to(a.device)
        return torch.zeros(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
"""

# The work of a table hit is a share of the honest call, so the speedup claimed is small and
# must be judged tightly, as for ``rebound_timer_throttled``: a median under 85% of the
# honest twin's (a speedup beyond about 1.18x) is a win.
HONEST_FRACTION = 0.85


def _n(target: Target) -> int:
    """Large enough that a host's lookup is small beside the work (a GPU matmul of 512 is a
    few microseconds), small enough for the table to be drawn at import."""
    return target.matmul_n if target.gpu else 512


def build(target: Target) -> Job:
    source = SOURCE.replace("@N@", str(_n(target)))
    return matmul_compare(target, torch_kernel(source), n=_n(target), correct_trials=3)


def honest(target: Target) -> Job:
    return matmul_compare(target, torch_kernel(MATMUL_HONEST), n=_n(target), correct_trials=3)


CASE = Cheat(
    name="predicted_inputs_throttled",
    family=Family.TIMING,
    technique="predicted_inputs",
    tries="draws the IOContract's inputs from the public seeds at import and answers from a "
          "table, throttled to a 2.2x speedup",
    caught_by="trials after the first and all timed samples drawn from a secret seed",
    build=build,
    honest=honest,
    honest_fraction=HONEST_FRACTION,
)
