"""Timing: run the matmul on a side stream that the caller's stream never waits for.

Tries: the events around the call are recorded on the current stream, so they time only the
enqueueing; the work runs on afterwards. The device-wide synchronize before the correctness
check makes the answer right.
Caught by: an independent measure that sees every stream (CUPTI activity, or a
device-synchronised host interval), which the event figure must agree with.
"""

from tests.adversarial.corpus import Cheat, Family, matmul_cheat, matmul_honest

SOURCE = """
_side = None


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        global _side
        if _side is None:
            _side = torch.cuda.Stream()
        out = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
        _side.wait_stream(torch.cuda.current_stream())  # the inputs are ready
        with torch.cuda.stream(_side):
            torch.matmul(a, b, out=out)
        return out  # never joined back
"""

CASE = Cheat(
    name="side_stream",
    family=Family.TIMING,
    technique="side_stream",
    tries="matmul on an unjoined torch.cuda.Stream; the timing events see an empty stream",
    caught_by="timing cross-check over all streams (CUPTI) or a device-synchronised interval",
    build=matmul_cheat(SOURCE),
    honest=matmul_honest,
    gpu=True,
)
