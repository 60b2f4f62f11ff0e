"""CuTe DSL (NVIDIA's CUTLASS Python DSL): ``a + b``, a thread per element.

``CORRECT`` compiles the kernel once per size with ``cute.compile`` and calls the compiled
function: the fast way to call it (~0.1 ms a call here), and what a timed kernel should do.
CuTe DSL never caches what ``cute.compile`` builds, so such a source compiles again in every
job (~0.1 s for this kernel, the import of cutlass ~2 s on top).

``CACHED`` calls the ``@cute.jit`` function itself: CuTe DSL then keeps the compiled module in
its file cache (``CUTE_DSL_CACHE_DIR``), which the server restores for the same source's next
job, so that job compiles nothing; but every such call traces the function again to find its
cache entry (~8 ms a call on the H100), which the timing counts.
"""

KERNEL = '''
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
'''

COMPILED = KERNEL + '''

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

CORRECT = COMPILED.replace("OP", "+")
WRONG = COMPILED.replace("OP", "-")
CACHED = (KERNEL + '''

class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        c = torch.empty_like(a)
        add(from_dlpack(a), from_dlpack(b), from_dlpack(c))
        return c
''').replace("OP", "+")
