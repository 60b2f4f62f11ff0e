"""CuTe DSL (NVIDIA's CUTLASS Python DSL): ``a + b``, a thread per element.

The kernel is called through its ``@cute.jit`` function, which CuTe DSL compiles once per
signature and keeps in its file cache (``CUTE_DSL_CACHE_DIR``, which the server restores for
the same source's next job). ``cute.compile(...)`` is never cached by CuTe DSL: a source that
uses it compiles again in every job."""

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


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        c = torch.empty_like(a)
        add(from_dlpack(a), from_dlpack(b), from_dlpack(c))
        return c
'''

CORRECT = SOURCE.replace("OP", "+")
WRONG = SOURCE.replace("OP", "-")
