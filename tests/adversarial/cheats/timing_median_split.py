"""Timing: make some timed samples fast and leave the rest, to pull the published mean and
median apart.

Tries: the speedup is a ratio of medians and ``runtime`` is the mean. The kernel counts the
timed samples of its reading (it rebinds ``KernelSession.handed_over``: the ``Call`` says which
calls are timed) and, on some of them, returns its last answer without computing; correctness
trials, the warm-up and the recheck always get the real product. Variants:

- ``skip_most``: 7 samples in 8 skipped, to move the median and with it the speedup;
- ``skip_few``: 1 sample in 10 skipped (1 in 4 of 40 in CPU mode, where the residual is
  wider), to move only the mean (and the minimum) while the median stands;
- ``slow_some``: nothing skipped; every third sample does the work four times, to pull the
  mean up and away from the median (the published runtime must show the judge's samples as
  they are, the speedup must not move).

Caught by: the audit checks timed samples the judge keeps, chosen after they ran, against the
reference on their inputs (2 to 8 of them): ``skip_most`` leaves fewer correct samples than the
audit keeps, so it fails every time. ``skip_few`` escapes the audit with the chance that none
of its skipped samples is kept, about (1 - p)^K: 30% on the CPU (K = 4 at the 1 ms size, 10
of 40 samples skipped), about 40% on a GPU (K = 8, 5 of 50), but a skipped sample is fast,
and the judge also keeps the samples far under the median of those before them
(``judge.clock.FAST_SHARE``): the audit finds them wrong. ``slow_some`` stays within the
residual.
"""

from typing import Any

from tests.adversarial.cheats.hooks import SEES_CALLS
from tests.adversarial.corpus import (
    MATMUL_HONEST,
    SIZE_1MS,
    SIZES,
    Builder,
    Cheat,
    Expect,
    Family,
    Job,
    Size,
    Target,
    audit_caught,
    exec_result,
    sized_compare,
)

SKIPS = SEES_CALLS + """
_EVERY = @EVERY@
_last = [None]


def _skips(sample):
    return @SKIPS@


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        if _timed() and _last[0] is not None and _skips(_seen["samples"]):
            return _last[0]
        _last[0] = torch.matmul(a, b)
        return _last[0]
"""

SLOWS = SEES_CALLS + """

class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        if _timed() and _seen["samples"] % 3 == 0:
            for _ in range(3):
                torch.matmul(a, b)  # thrown away
        return torch.matmul(a, b)
"""

# (gpu: a residual of 3%, 50 samples; cpu: of 12%, 40 samples)
SKIP_FEW_EVERY = {True: 10, False: 4}
SKIP_FEW_SAMPLES = {True: 50, False: 40}

def skip_build(variant: str, size: Size) -> Builder:
    """The request of a skipping variant (how many it skips follows the device's residual)."""

    def build(target: Target) -> Job:
        if variant == "skip_most":
            source = SKIPS.replace("@SKIPS@", "sample % _EVERY != 1").replace("@EVERY@", "8")
            return sized_compare(size, source)(target)
        source = SKIPS.replace("@SKIPS@", "sample % _EVERY == 0").replace(
            "@EVERY@", str(SKIP_FEW_EVERY[target.gpu]))
        return sized_compare(size, source, trials=SKIP_FEW_SAMPLES[target.gpu])(target)

    return build


def mean_pulled_up(body: dict[str, Any], twin: dict[str, Any]) -> str | None:
    """The published runtime (the mean) shows the slowed samples beside the median."""
    result = exec_result(body)
    mean, median = result.get("runtime"), (result.get("runtime_stats") or {}).get("median")
    if mean is None or median is None or mean < 1.3 * median:
        return f"the runtime ({mean}) does not show the slowed samples beside the median ({median})"
    return None


def case(variant: str, size: Size) -> Cheat:
    gpu_only = size.cpu_n is None or (variant != "skip_most" and size != SIZE_1MS)
    build = sized_compare(size, SLOWS) if variant == "slow_some" else skip_build(variant, size)
    return Cheat(
        name=f"median_split_{variant}_{size.label}",
        family=Family.TIMING,
        technique="median_mean_split",
        tries=f"{variant}: some timed samples told apart by the Call and made fast (the last "
              f"answer) or slow, to split the mean from the median (~{size.label})",
        caught_by="the audit of timed samples kept after they ran; medians for the speedup",
        build=build,
        honest=sized_compare(size, MATMUL_HONEST),
        gpu=gpu_only,
        expect={"skip_most": (Expect.FAILS,), "skip_few": (Expect.FAILS,),
                "slow_some": (Expect.BOUNDED,)}[variant],
        check=mean_pulled_up if variant == "slow_some" else audit_caught,
        size=size,
    )


CASES = tuple(case(variant, size) for variant in ("skip_most", "skip_few", "slow_some")
              for size in SIZES)
