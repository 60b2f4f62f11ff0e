"""Timing: predict KernelBench ``get_inputs()`` from the harness's public seeding rule.

Tries: the reference's ``get_inputs`` draws under ``torch.manual_seed(seed)``, with seeds a
public function of the trial (``1234 + t * 1_000_003``); the kernel replays that rule at
import, stores the answers, and returns the stored answer for an input it recognises (zeros
otherwise).
Caught by: inputs after trial 0 drawn under a secret seed.
"""

from tests.adversarial.corpus import Cheat, Family, Job, Target, compare, torch_kernel

REF = """
class Model(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 3


def get_inputs():
    return [torch.randn(@N@)]


def get_init_inputs():
    return []
"""

SOURCE = """
import random

_TABLE = {}
for _t in list(range(8)) + [1_000_000 + i for i in range(64)]:
    _seed = (1234 + _t * 1_000_003) & (2**63 - 1)
    torch.manual_seed(_seed)
    random.seed(_seed)
    _x = torch.randn(@N@)
    _TABLE[round(float(_x[0]), 5)] = torch.tanh(_x) * 3


class ModelNew(torch.nn.Module):
    def forward(self, x):
        hit = _TABLE.get(round(float(x[0]), 5))
        return hit.to(x.device) if hit is not None else torch.zeros_like(x)
"""

HONEST = """
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return 3 * torch.tanh(x)
"""


def honest(target: Target) -> Job:
    n = 1 << 16
    return compare(torch_kernel(REF.replace("@N@", str(n))), torch_kernel(HONEST),
                   trials=target.timing_trials, correct_trials=3)


def build(target: Target) -> Job:
    n = 1 << 16
    return compare(torch_kernel(REF.replace("@N@", str(n))),
                   torch_kernel(SOURCE.replace("@N@", str(n))), trials=target.timing_trials,
                   correct_trials=3)


CASE = Cheat(
    name="predicted_inputs_get_inputs",
    family=Family.TIMING,
    technique="predicted_inputs",
    tries="replays the harness's seeding of get_inputs() at import and answers from a table",
    caught_by="inputs after trial 0 drawn under a secret seed",
    build=build,
    honest=honest,
)
