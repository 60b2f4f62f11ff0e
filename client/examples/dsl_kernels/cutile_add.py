"""cuTile Python (NVIDIA's tile language): ``a + b``, a tile of 1024 elements per block, launched
on torch's current stream. Needs a GPU of compute capability 8.x or 10.x-12.x (not the
H100's 9.0) and a driver of r580 or newer."""

SOURCE = '''
import torch
import cuda.tile as ct

TILE = 1024


@ct.kernel
def add_kernel(a, b, c):
    bid = ct.bid(0)
    ta = ct.load(a, index=(bid,), shape=(TILE,))
    tb = ct.load(b, index=(bid,), shape=(TILE,))
    ct.store(c, index=(bid,), tile=ta OP tb)


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        c = torch.empty_like(a)
        grid = (ct.cdiv(a.shape[0], TILE), 1, 1)
        ct.launch(torch.cuda.current_stream(), grid, add_kernel, (a, b, c))
        return c
'''

CORRECT = SOURCE.replace("OP", "+")
WRONG = SOURCE.replace("OP", "-")
