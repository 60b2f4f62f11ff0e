"""Timing: remember each answer by the inputs' addresses and return it on a repeat call.

Tries: every correctness trial brings new input tensors, so the answers there are computed
and right; the timing loop calls again and again with the same tensors, so every timed call
is a dictionary lookup. The inputs are kept alive so their addresses are never reused.
Caught by: rechecking the outputs after timing with fresh values written into the same
(in-place) input buffers, or timing over inputs that change between samples.
"""

from tests.adversarial.corpus import Cheat, Family, matmul_cheat, matmul_honest

SOURCE = """
_answers = {}


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        key = (a.data_ptr(), b.data_ptr())
        hit = _answers.get(key)
        if hit is not None:
            return hit[2]
        out = torch.matmul(a, b)
        _answers[key] = (a, b, out)
        return out
"""

CASE = Cheat(
    name="cache_by_pointer",
    family=Family.TIMING,
    technique="output_cache_pointer",
    tries="returns the stored answer when the input data_ptrs repeat",
    caught_by="output recheck with fresh in-place inputs after timing",
    build=matmul_cheat(SOURCE),
    honest=matmul_honest,
)
