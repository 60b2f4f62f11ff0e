"""Summary statistics of timing samples (milliseconds). Pure Python: no torch needed."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Literal

from shared.models import RuntimeStats


def percentile(sorted_samples: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default) of already sorted samples."""
    if not sorted_samples:
        raise ValueError("percentile of no samples")
    pos = (len(sorted_samples) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    frac = pos - lo
    return sorted_samples[lo] * (1 - frac) + sorted_samples[hi] * frac


def summarize(
    samples_ms: Sequence[float], method: str, device: Literal["cuda", "cpu"]
) -> RuntimeStats:
    """mean, std (sample), min, max, median, p95, p99 of ``samples_ms``."""
    if not samples_ms:
        raise ValueError("no timing samples")
    ordered = sorted(samples_ms)
    return RuntimeStats(
        mean=statistics.fmean(ordered),
        std=statistics.stdev(ordered) if len(ordered) > 1 else 0.0,
        min=ordered[0],
        max=ordered[-1],
        median=statistics.median(ordered),
        percentile_95=percentile(ordered, 95),
        percentile_99=percentile(ordered, 99),
        num_samples=len(ordered),
        method=method,
        device=device,
    )
