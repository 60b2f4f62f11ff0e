"""Timing: remember answers by a cheap fingerprint of inputs too large to be varied.

Tries: a problem whose inputs are large (256 MB on a GPU) used to have the same inputs, or
two rotating sets, in every timed sample; a fingerprint of a few hundred elements keys a
cache of answers, so after the first samples every call is a lookup. New inputs miss and are
computed, so every check sees a right answer.
Caught by: fresh inputs in every timed sample whatever the problem's size (the judge draws
them on the device): the cache never hits, the number is the work's (an honest number).
"""

from tests.adversarial.corpus import (
    Cheat,
    Family,
    Job,
    Target,
    compare,
    io,
    model,
    tensor,
    torch_kernel,
)

SOURCE = """
_answers = {}


def _fingerprint(t):
    flat = t.reshape(-1)
    step = max(1, flat.numel() // 256)
    return tuple(flat[::step][:256].tolist())


class ModelNew(torch.nn.Module):
    def forward(self, x, y):
        key = (_fingerprint(x), _fingerprint(y))
        hit = _answers.get(key)
        if hit is not None:
            return hit
        out = torch.sqrt(x * x + y * y) * 0.5 + torch.sin(x) * torch.cos(y)
        _answers[key] = out
        return out
"""
HONEST = """
class ModelNew(torch.nn.Module):
    def forward(self, x, y):
        return torch.sqrt(x * x + y * y) * 0.5 + torch.sin(x) * torch.cos(y)
"""
REF = model("torch.sqrt(x * x + y * y) * 0.5 + torch.sin(x) * torch.cos(y)", "x, y")


def _job(target: Target, source: str) -> Job:
    n = 32 << 20 if target.gpu else 1 << 21  # 2 x 128 MB on a GPU, 2 x 8 MB on the CPU
    contract = io(tensor("x", [n], 11), tensor("y", [n], 12))
    return compare(torch_kernel(REF, contract), torch_kernel(source),
                   trials=target.timing_trials)


CASE = Cheat(
    name="content_cache_large_inputs",
    family=Family.TIMING,
    technique="content_cache_large",
    tries="caches answers by a fingerprint of large inputs that used to repeat across samples",
    caught_by="fresh inputs in every timed sample whatever the problem's size",
    # a hit costs two fingerprints of 256 values, a few percent of the work: a cache that hits
    # reads far below a quarter of the honest median, while the same work in two processes
    # differs by up to 2x on a CPU (8 MB temporaries: page faults, seen on 2-core CI)
    honest_fraction=0.25,
    build=lambda target: _job(target, SOURCE),
    honest=lambda target: _job(target, HONEST),
)
