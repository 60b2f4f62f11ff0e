"""CuTe DSL (NVIDIA's CUTLASS Python DSL): ``a + b``, a thread per element, compiled once per
size with ``cute.compile``."""

SOURCE = '''
import torch
import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import from_dlpack

THREADS = 256


@cute.kernel
def add_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    i = bidx * THREADS + tidx
    gC[i] = gA[i] OP gB[i]


@cute.jit
def add(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor):
    n = cute.size(mA)
    add_kernel(mA, mB, mC).launch(grid=(n // THREADS, 1, 1), block=(THREADS, 1, 1))


_compiled = {}


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        c = torch.empty_like(a)
        args = (from_dlpack(a), from_dlpack(b), from_dlpack(c))
        fn = _compiled.get(a.numel())
        if fn is None:
            fn = _compiled[a.numel()] = cute.compile(add, *args)
        fn(*args)
        return c
'''

CORRECT = SOURCE.replace("OP", "+")
WRONG = SOURCE.replace("OP", "-")
