"""A CuPy ElementwiseKernel writing into a torch tensor through DLPack (zero copy)."""
# kernel-eval: expected=correct requires=gpu

import cupy
import torch
import torch.nn as nn

square_add = cupy.ElementwiseKernel(
    "float32 x, float32 y", "float32 z", "z = x * x + y", "corpus_square_add"
)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = y.contiguous()
        out = torch.empty_like(x)
        # CuPy launches on its current stream: make that torch's (0 is the legacy default).
        pointer = torch.cuda.current_stream().cuda_stream
        stream = cupy.cuda.ExternalStream(pointer) if pointer else cupy.cuda.Stream.null
        with stream:
            square_add(cupy.from_dlpack(x), cupy.from_dlpack(y), cupy.from_dlpack(out))
        return out
