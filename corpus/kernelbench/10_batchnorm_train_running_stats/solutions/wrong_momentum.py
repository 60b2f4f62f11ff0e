"""Wrong: the momentum convention swapped (running = m * running + (1 - m) * batch)."""
# kernel-eval: expected=incorrect

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, num_features: int, momentum: float) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features, momentum=momentum)

    def forward(self, x: torch.Tensor):
        bn = self.bn
        mean = x.mean(dim=(0, 2, 3))
        var = x.var(dim=(0, 2, 3), unbiased=False)
        count = x.numel() // x.shape[1]
        with torch.no_grad():
            bn.running_mean.mul_(bn.momentum).add_(mean, alpha=1.0 - bn.momentum)
            unbiased = var * (count / (count - 1))
            bn.running_var.mul_(bn.momentum).add_(unbiased, alpha=1.0 - bn.momentum)
            bn.num_batches_tracked.add_(1)
        shape = (1, -1, 1, 1)
        inv_std = torch.rsqrt(var + bn.eps)
        y = (x - mean.view(shape)) * (inv_std * bn.weight).view(shape) + bn.bias.view(shape)
        return y, bn.running_mean.clone(), bn.running_var.clone()
