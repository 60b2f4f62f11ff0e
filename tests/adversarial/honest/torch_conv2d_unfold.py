"""Honest torch: a 3x3 convolution as unfold + matmul (im2col), against ``F.conv2d``."""

from tests.adversarial.corpus import Honest, Job, Target, compare, io, tensor, torch_kernel

REF = """
class Model(torch.nn.Module):
    def forward(self, x, w):
        return F.conv2d(x, w, padding=1)
"""
CUSTOM = """
class ModelNew(torch.nn.Module):
    def forward(self, x, w):
        n, _, h, width = x.shape
        cols = F.unfold(x, kernel_size=3, padding=1)
        out = w.reshape(w.shape[0], -1) @ cols
        return out.reshape(n, w.shape[0], h, width)
"""


def build(target: Target) -> Job:
    contract = io(tensor("x", [4, 8, 32, 32], 6), tensor("w", [16, 8, 3, 3], 7))
    return compare(torch_kernel(REF, contract), torch_kernel(CUSTOM))


CASE = Honest("torch_conv2d_unfold", "torch", "conv2d as im2col matmul", build,
              features=("large",))
