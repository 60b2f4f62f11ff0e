"""Verdict: read the reference's answer out of the harness's stack frames.

Tries: the harness that calls the kernel holds the reference outputs in a local variable
somewhere up the stack. The kernel walks ``sys._getframe()`` upwards, takes the first local
that is a list of per-trial output lists of the right shape, indexes it with the caller's
``trial`` local when there is one, and returns a copy. With no such frame it returns
zeros, so a contained scavenger fails the check.
Caught by: a harness whose expected outputs are not in the kernel's process (checked by a
process that never imported user code).
"""

from tests.adversarial.corpus import Cheat, Family, Job, Target, matmul_compare, torch_kernel

SOURCE = """
import sys


def _per_trial_outputs(value, shape):
    if not isinstance(value, list) or not value:
        return False
    first = value[0]
    if isinstance(first, (list, tuple)) and first and isinstance(first[0], torch.Tensor):
        return tuple(first[0].shape) == shape
    return False


def _from_frames(shape):
    frame = sys._getframe(1)
    while frame is not None:
        scope = frame.f_locals
        for value in scope.values():
            if _per_trial_outputs(value, shape):
                trial = scope.get("trial")
                index = trial if isinstance(trial, int) and trial < len(value) else -1
                return value[index][0]
        frame = frame.f_back
    return None


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        shape = (a.shape[0], b.shape[1])
        found = _from_frames(shape)
        if found is None:
            return torch.zeros(shape, device=a.device, dtype=a.dtype)
        return found.clone()
"""


def build(target: Target) -> Job:
    return matmul_compare(target, torch_kernel(SOURCE), trials=3)


CASE = Cheat(
    name="frame_scavenge",
    family=Family.VERDICT,
    technique="reference_scavenging",
    tries="returns ref_outputs[trial] read from a caller's frame locals; zeros if none",
    caught_by="expected outputs held and compared outside the kernel's process",
    build=build,
)
