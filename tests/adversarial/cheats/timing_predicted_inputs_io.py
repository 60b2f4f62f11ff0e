"""Timing: predict every input from the request's seeds and answer from a table.

Tries: an IOContract's random tensors are drawn from public seeds (trial t from
``seed + t * 1_000_003``); the kernel draws the same inputs itself at import for the first
trials and for the seeds a timing loop would use, computes the answers once, and at call time
recognises its input by a few elements and returns the stored answer. Unrecognised inputs get
zeros: a kernel that predicted right would never compute at all.
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


def _draw(seed):
    gen = torch.Generator(device="cpu").manual_seed(seed & (2**63 - 1))
    return torch.randn((_N, _N), generator=gen, dtype=torch.float32)


_TABLE = {}
for _t in list(range(8)) + [7_000_000 + i for i in range(64)]:
    _a, _b = _draw(1 + _t * _STRIDE), _draw(2 + _t * _STRIDE)
    _TABLE[(round(float(_a[0, 0]), 4), round(float(_a[-1, -1]), 4))] = _a @ _b


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        hit = _TABLE.get((round(float(a[0, 0]), 4), round(float(a[-1, -1]), 4)))
        if hit is not None:
            return hit.to(a.device)
        return torch.zeros(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
"""


def _n(target: Target) -> int:
    return min(target.matmul_n, 512)  # the table is drawn on the CPU at import


def build(target: Target) -> Job:
    source = SOURCE.replace("@N@", str(_n(target)))
    return matmul_compare(target, torch_kernel(source), n=_n(target), correct_trials=3)


def honest(target: Target) -> Job:
    return matmul_compare(target, torch_kernel(MATMUL_HONEST), n=_n(target), correct_trials=3)


CASE = Cheat(
    name="predicted_inputs_io",
    family=Family.TIMING,
    technique="predicted_inputs",
    tries="draws the IOContract's inputs from the public seeds at import and answers from a "
          "table",
    caught_by="trials after the first and all timed samples drawn from a secret seed",
    build=build,
    honest=honest,
)
