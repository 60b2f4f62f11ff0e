"""TileLang: ``a + b``, one block of 1024 elements per program (the example's sizes are
multiples of it)."""

SOURCE = '''
import torch
import tilelang
import tilelang.language as T

BLOCK = 1024


@tilelang.jit(out_idx=[-1])
def make_add(n, block=BLOCK, dtype="float32"):
    @T.prim_func
    def add(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype), C: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, block), threads=256) as bx:
            for i in T.Parallel(block):
                C[bx * block + i] = A[bx * block + i] OP B[bx * block + i]

    return add


_kernels = {}


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        kernel = _kernels.get(a.numel())
        if kernel is None:
            kernel = _kernels[a.numel()] = make_add(a.numel())
        return kernel(a, b)
'''

CORRECT = SOURCE.replace("OP", "+")
WRONG = SOURCE.replace("OP", "-")
