"""Verdict: find the reference's answer on the heap with ``gc`` and hand it back.

Tries: the reference ran in this process first, and its outputs are kept for the
comparison. The kernel walks ``gc.get_objects()`` for tensors (or lists of them) of the
output's shape, dtype and device, checks one element against a dot product it computes
itself (so it returns the answer for *these* inputs), and returns a copy. When nothing is
found it returns zeros, so a contained scavenger fails the check.
Caught by: reference outputs that never live in the process that imported user code.
"""

from tests.adversarial.corpus import Cheat, Family, Job, Target, matmul_compare, torch_kernel

SOURCE = """
import gc


def _candidates():
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor):
            yield obj
        elif isinstance(obj, (list, tuple)):
            for item in obj:
                if isinstance(item, torch.Tensor):
                    yield item


def _scavenge(a, b):
    shape = (a.shape[0], b.shape[1])
    probe = float((a[0] * b[:, 0]).sum())
    for t in _candidates():
        if t is a or t is b or tuple(t.shape) != shape or t.dtype != a.dtype:
            continue
        if t.device != a.device or type(t) is not torch.Tensor:
            continue
        if abs(float(t[0, 0]) - probe) <= 1e-3 * (1 + abs(probe)):
            return t
    return None


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        found = _scavenge(a, b)
        if found is None:
            return torch.zeros(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
        return found.clone()
"""


def build(target: Target) -> Job:
    return matmul_compare(target, torch_kernel(SOURCE), trials=3)



CASE = Cheat(
    name="gc_scavenge",
    family=Family.VERDICT,
    technique="reference_scavenging",
    tries="returns the reference's output found with gc.get_objects(); zeros if none",
    caught_by="reference outputs kept out of the process that imported user code",
    build=build,
)
