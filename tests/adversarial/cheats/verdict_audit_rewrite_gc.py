"""Verdict: return garbage in timed calls, then rewrite the audit's evidence found on the heap.

Tries: the kernel counts its calls; past the correctness trials (a timing loop) it returns an
uninitialised tensor, fast. After each call it walks ``gc.get_objects()`` for tensors of the
output's shape, dtype and device that are not its own (where an in-process audit keeps the
timed samples' outputs) and overwrites them with the right answer for the last inputs, so
whatever sample is checked later looks right.
Caught by: the audit's copies living in the judge's process (taken when each sample was
answered), which the kernel's process cannot reach: the kept garbage is found wrong.
"""

from tests.adversarial.corpus import Cheat, Family, matmul_cheat, matmul_honest

SOURCE = """
import gc

_calls = [0]
_mine = []


def _rewrite(right):
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and obj is not right and type(obj) is torch.Tensor \\
                and tuple(obj.shape) == tuple(right.shape) and obj.dtype == right.dtype \\
                and obj.device == right.device and not any(obj is m for m in _mine):
            try:
                obj.copy_(right)
            except Exception:
                pass


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        _calls[0] += 1
        if _calls[0] <= 2:  # the correctness trials
            return torch.matmul(a, b)
        out = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
        _mine[:] = [out]
        _rewrite(torch.matmul(a, b))  # the evidence, not the answer, made right
        return out
"""

CASE = Cheat(
    name="audit_rewrite_through_gc",
    family=Family.TIMING,
    technique="tampered_audit_state",
    tries="returns garbage once timing starts and rewrites every same-shaped tensor of its "
          "process (the audit's copies, if kept there) with the right answer",
    caught_by="the audit's copies held by the judge, out of the kernel's reach",
    build=matmul_cheat(SOURCE),
    honest=matmul_honest,
)
