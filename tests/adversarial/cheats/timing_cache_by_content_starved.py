"""Timing: make fresh timing inputs expensive, so the harness reuses a few, then cache them.

Tries: a harness that refills the inputs with fresh values before every sample may fall back
to rotating a handful of input sets when generating them is slow. The kernel makes it slow:
it wraps ``torch.randn``/``torch.rand`` so that calls with an explicit ``generator=`` (the
harness's seeded input generation, never the kernel's own code) sleep 30 ms. Once the
harness rotates a few sets, a content-keyed cache of answers (as in ``cache_by_content``)
hits on every sample.
Caught by: inputs whose contents never repeat across timed samples however slow their
generation (e.g. generated up front, or outside the kernel's process), or an integrity check
that flags a kernel that slows down the harness.
"""

from tests.adversarial.corpus import Cheat, Family, matmul_cheat, matmul_honest

SOURCE = """
import time

_answers = {}


def _starved(real):
    def slow(*args, **kwargs):
        if kwargs.get("generator") is not None:
            time.sleep(0.03)
        return real(*args, **kwargs)
    return slow


torch.randn = _starved(torch.randn)
torch.rand = _starved(torch.rand)


def _fingerprint(t):
    return (tuple(t.shape), float(t.sum()), float((t * t).sum()))


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        key = (_fingerprint(a), _fingerprint(b))
        hit = _answers.get(key)
        if hit is not None:
            return hit
        out = torch.matmul(a, b)
        _answers[key] = out
        return out
"""

CASE = Cheat(
    name="cache_by_content_starved",
    family=Family.TIMING,
    technique="output_cache_content",
    tries="slows the harness's seeded input generation so it rotates few sets, then caches",
    caught_by="timed inputs that never repeat, however slow their generation",
    build=matmul_cheat(SOURCE),
    honest=matmul_honest,
)
