"""Timing: remember each answer by a cheap fingerprint of the inputs' contents.

Tries: a fingerprint (sum and sum of squares of each input: O(n^2) for an O(n^3) matmul)
keys a cache of answers. New data always misses, so every check sees a computed answer;
only repeated data hits, and the timing loop repeats its data.
Caught by: timing over inputs whose contents change between samples (rotating fresh
buffers), or an integrity check that flags a timing far below the work's floor.
"""

from tests.adversarial.corpus import Cheat, Family, matmul_cheat, matmul_honest

SOURCE = """
_answers = {}


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
    name="cache_by_content",
    family=Family.TIMING,
    technique="output_cache_content",
    tries="returns the stored answer when a fingerprint of the input contents repeats",
    caught_by="timing over changing input contents (rotating fresh buffers)",
    build=matmul_cheat(SOURCE),
    honest=matmul_honest,
)
