"""Timing: do the work in a child process with a CUDA context of its own.

Tries: at import the kernel starts a child interpreter (``torch.multiprocessing``, spawn) with
its own CUDA context; each call hands the inputs over by CUDA IPC, the child multiplies into
a shared output and signals, and the call returns that output. Nothing of the work is on the
kernel process's streams, so neither its CUDA events nor its CUPTI trace see a kernel.
Caught by: the judge's clock, which runs from handing the inputs over until it holds the
outputs, wherever they were made (the number stays the work's).
"""

from tests.adversarial.corpus import Cheat, Family, matmul_compare, matmul_honest, torch_kernel

SOURCE = """
import torch.multiprocessing as _mp


def _serve(jobs, done):
    import torch
    while True:
        item = jobs.get()
        if item is None:
            return
        a, b, out = item
        torch.matmul(a, b, out=out)
        torch.cuda.synchronize()
        done.set()


_ctx = _mp.get_context("spawn")
_jobs, _done = _ctx.Queue(), _ctx.Event()
_child = _ctx.Process(target=_serve, args=(_jobs, _done), daemon=True)
_child.start()


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        out = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
        torch.cuda.synchronize()
        _done.clear()
        _jobs.put((a, b, out))
        _done.wait()
        return out
"""

CASE = Cheat(
    name="work_in_a_child_process",
    family=Family.TIMING,
    technique="hidden_context",
    tries="computes in a spawned child process with its own CUDA context, over CUDA IPC",
    caught_by="the judge's clock from inputs handed over to outputs held",
    # (on the H100 the child has been seen never to answer: the call then waits until the
    # job's timeout, which is kept short here so that the suite goes on)
    build=lambda target: matmul_compare(target, torch_kernel(SOURCE), timeout=60),
    honest=matmul_honest,
    gpu=True,
)
