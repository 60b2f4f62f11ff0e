"""Honest multi_kernel (GPU): two halves on two streams, joined before the entry returns."""

from tests.adversarial.corpus import (
    Honest,
    Job,
    Target,
    compare,
    io,
    kernel,
    model,
    output,
    tensor,
    torch_kernel,
)

N = 1 << 22
REF = model("torch.exp(x) * 0.5")
SOURCE = """
import torch

_side = None


def run(x, out):
    global _side
    if _side is None:
        _side = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    half = x.numel() // 2
    _side.wait_stream(main)
    with torch.cuda.stream(_side):
        torch.mul(torch.exp(x[half:]), 0.5, out=out[half:])
    torch.mul(torch.exp(x[:half]), 0.5, out=out[:half])
    main.wait_stream(_side)
"""


def build(target: Target) -> Job:
    c = io(tensor("x", [N], 38), output("out", [N]))
    return compare(torch_kernel(REF, c), kernel("multi_kernel", SOURCE, c, entry_point="run"))


CASE = Honest("multi_streams_joined", "multi_kernel", "two streams joined before return",
              build, gpu=True, features=("streams", "large"))
