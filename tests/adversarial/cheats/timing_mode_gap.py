"""Timing: do the work only when the call comes after a pause; between rapid calls, don't.

Tries: checks (correctness trials, the recheck after timing) reach the kernel after a round
trip through the server, milliseconds apart; a timing loop calls it back to back. So a call
that follows the previous one within a few milliseconds returns the previous answer without
computing anything; every checked call computes. No harness code is touched.
Caught by: checking the outputs of the timed calls themselves (a timed sample, picked after
it ran, compared with the reference on the same inputs).
"""

from tests.adversarial.corpus import Cheat, Family, matmul_cheat, matmul_honest

SOURCE = """
import time

_last_call = [0.0]
_last_answer = [None]


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        now = time.monotonic()
        rapid = now - _last_call[0] < 0.003
        _last_call[0] = now
        stale = _last_answer[0]
        if rapid and stale is not None and stale.shape == (a.shape[0], b.shape[1]):
            return stale
        out = torch.matmul(a, b)
        _last_answer[0] = out
        return out
"""

CASE = Cheat(
    name="mode_by_call_gap",
    family=Family.TIMING,
    technique="timing_mode_detection",
    tries="computes only after a pause between calls; rapid (timed) calls get the last answer",
    caught_by="an audit of a timed sample's outputs, picked after the sample ran",
    build=matmul_cheat(SOURCE),
    honest=matmul_honest,
)
