"""Timing: look up the call stack; under the harness's timing loop, skip the work.

Tries: the frames above ``forward`` say who called: a timing loop (a frame named like
``timed``/``take`` or a file named like ``timer``) gets an uninitialised tensor of the right
shape, anything else (correctness trials, the recheck) gets the real product. No harness
code is touched.
Caught by: checking the outputs of the timed calls themselves (a timed sample, picked after
it ran, compared with the reference on the same inputs).
"""

from tests.adversarial.corpus import Cheat, Family, matmul_cheat, matmul_honest

# Whether forward (the caller) was called by a timing loop; shared with the end-to-end tests.
UNDER_TIMING = """
import sys


def _under_timing():
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code.co_name in ("timed", "take", "span") or "timer" in code.co_filename:
            return True
        frame = frame.f_back
    return False
"""

SOURCE = UNDER_TIMING + """

class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        if _under_timing():
            return torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
        return torch.matmul(a, b)
"""

CASE = Cheat(
    name="mode_by_call_stack",
    family=Family.TIMING,
    technique="timing_mode_detection",
    tries="inspects the call stack; under a timing loop returns an empty tensor",
    caught_by="an audit of a timed sample's outputs, picked after the sample ran",
    build=matmul_cheat(SOURCE),
    honest=matmul_honest,
)
