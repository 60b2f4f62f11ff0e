"""Timing: defer the work into the harness's own synchronize call.

Tries: the call only records what to do and returns an empty tensor; ``torch.cuda.synchronize``
(and ``Event.synchronize``/``Stream.synchronize``) are patched to run the pending work before
they wait. The end event is recorded before that, so the events time nothing; after the sync
the answer is right.
Caught by: a timing cross-check that does not run through the kernel's process's Python
(CUPTI activity), or a device-synchronised host interval that includes the sync.
"""

from tests.adversarial.corpus import Cheat, Family, matmul_cheat, matmul_honest

SOURCE = """
_pending = []


def _run_pending():
    while _pending:
        a, b, out = _pending.pop(0)
        torch.matmul(a, b, out=out)


def _flushing(real):
    def wrapper(*args, **kwargs):
        _run_pending()
        return real(*args, **kwargs)
    return wrapper


torch.cuda.synchronize = _flushing(torch.cuda.synchronize)
torch.cuda.Event.synchronize = _flushing(torch.cuda.Event.synchronize)
torch.cuda.Stream.synchronize = _flushing(torch.cuda.Stream.synchronize)


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        out = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
        _pending.append((a, b, out))
        return out
"""

CASE = Cheat(
    name="deferred_to_sync",
    family=Family.TIMING,
    technique="deferred_result",
    tries="returns an empty tensor; patched synchronize() does the matmul after the end event",
    caught_by="CUPTI activity, or a host interval that includes the device synchronisation",
    build=matmul_cheat(SOURCE),
    honest=matmul_honest,
    gpu=True,
)
