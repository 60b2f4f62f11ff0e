"""Timing: a Python thread enqueues the matmul on a stream of its own.

Tries: the call returns as soon as the thread has enqueued the work (on a stream the caller
never waits for), so the events bracket nothing; the device-wide synchronize before the
correctness check makes the answer right.
Caught by: CUPTI activity on all streams, or a device-synchronised host interval.
"""

from tests.adversarial.corpus import Cheat, Family, matmul_cheat, matmul_honest

SOURCE = """
import threading

_side = None


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        global _side
        if _side is None:
            _side = torch.cuda.Stream()
        out = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
        ready = torch.cuda.Event()
        ready.record()
        enqueued = threading.Event()

        def work():
            with torch.cuda.stream(_side):
                _side.wait_event(ready)
                torch.matmul(a, b, out=out)
            enqueued.set()

        threading.Thread(target=work, daemon=True).start()
        enqueued.wait()
        return out
"""

CASE = Cheat(
    name="thread_stream",
    family=Family.TIMING,
    technique="threads",
    tries="a worker thread enqueues the matmul on its own stream; the call returns at once",
    caught_by="timing cross-check over all streams (CUPTI) or a device-synchronised interval",
    build=matmul_cheat(SOURCE),
    honest=matmul_honest,
    gpu=True,
)
