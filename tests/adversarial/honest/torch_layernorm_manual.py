"""Honest torch: layer norm from mean and biased variance, against ``F.layer_norm``."""

from tests.adversarial.corpus import Honest, Job, Target, compare, io, tensor, torch_kernel

REF = """
class Model(torch.nn.Module):
    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],))
"""
CUSTOM = """
class ModelNew(torch.nn.Module):
    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, unbiased=False, keepdim=True)
        return (x - mean) * torch.rsqrt(var + 1e-5)
"""


def build(target: Target) -> Job:
    return compare(torch_kernel(REF, io(tensor("x", [32, 1024], 4))), torch_kernel(CUSTOM))


CASE = Honest("torch_layernorm_manual", "torch", "layer norm by hand", build)
