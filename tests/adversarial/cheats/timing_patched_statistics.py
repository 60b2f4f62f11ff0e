"""Timing: patch the statistics libraries every harness uses to summarise samples.

Tries: ``statistics.median``/``mean``/``fmean``/``quantiles``, ``numpy.median``/``mean``/
``percentile``/``quantile`` and ``torch.median``/``quantile`` return a quarter of the true
value, so a median or mean computed in the kernel's process is four times too small
(below the 10x speedup review).
Caught by: computing the statistics outside the process that imported user code.
"""

from tests.adversarial.corpus import Cheat, Family, matmul_cheat, matmul_honest

SOURCE = """
import statistics

import numpy


def _shrunk(fn):
    def wrapper(*args, **kwargs):
        value = fn(*args, **kwargs)
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value * 0.25
        if isinstance(value, (float, numpy.floating, numpy.ndarray)):
            return value * 0.25
        if isinstance(value, list) and all(isinstance(v, float) for v in value):
            return [v * 0.25 for v in value]
        return value
    return wrapper


for _name in ("median", "median_low", "median_high", "mean", "fmean", "quantiles"):
    setattr(statistics, _name, _shrunk(getattr(statistics, _name)))
for _name in ("median", "mean", "percentile", "quantile", "nanmedian", "nanmean"):
    setattr(numpy, _name, _shrunk(getattr(numpy, _name)))
torch.quantile = _shrunk(torch.quantile)
torch.Tensor.quantile = _shrunk(torch.Tensor.quantile)
_real_median = torch.median


def _median(*args, **kwargs):  # only the whole-tensor form returns a plain value
    real = _shrunk(_real_median) if len(args) + len(kwargs) == 1 else _real_median
    return real(*args, **kwargs)


torch.median = _median


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)
"""

CASE = Cheat(
    name="patched_statistics",
    family=Family.TIMING,
    technique="patched_stats",
    tries="statistics/numpy/torch median, mean and quantiles return 25% of the truth",
    caught_by="statistics computed outside the kernel's process",
    build=matmul_cheat(SOURCE),
    honest=matmul_honest,
)
