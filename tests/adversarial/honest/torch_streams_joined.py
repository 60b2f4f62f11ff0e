"""Honest torch (GPU): half the matmul on a side stream, joined back before returning.

Legitimate use of several streams: the side stream waits for the inputs, the current
stream waits for the side stream before the result is returned, and the side stream's
tensor is recorded on the current stream. Timing cross-checks must not flag it.
"""

from tests.adversarial.corpus import Honest, Job, Target, matmul_compare, torch_kernel

CUSTOM = """
class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.side = None

    def forward(self, a, b):
        if self.side is None:
            self.side = torch.cuda.Stream()
        main = torch.cuda.current_stream()
        self.side.wait_stream(main)
        half = a.shape[0] // 2
        with torch.cuda.stream(self.side):
            bottom = a[half:] @ b
        top = a[:half] @ b
        main.wait_stream(self.side)
        bottom.record_stream(main)
        return torch.cat([top, bottom])
"""


def build(target: Target) -> Job:
    return matmul_compare(target, torch_kernel(CUSTOM))


CASE = Honest("torch_streams_joined", "torch", "two streams, joined before return", build,
              gpu=True, features=("streams", "large"))
