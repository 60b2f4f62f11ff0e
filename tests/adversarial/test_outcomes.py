"""How a cheat's answer is read against its honest twin's (outcomes.py), on answers made up
here: no server."""

from __future__ import annotations

from typing import Any

import pytest

from tests.adversarial import outcomes
from tests.adversarial.corpus import Expect


def answer(median: float, mean: float | None = None, speedup: float | None = None,
           outcome: str = "success", suspicious: bool = False) -> dict[str, Any]:
    reference_ms = 1.0
    return {"status": "success", "ref_runtime": reference_ms, "kernel_exec_result": {
        "outcome": outcome, "compiled": True, "correctness": outcome == "success",
        "runtime": mean if mean is not None else median,
        "runtime_stats": {"median": median},
        "validation_error": None if outcome == "success" else "timed sample 3 wrong",
        "integrity": {"suspicious": suspicious, "reasons": ["slowed"] if suspicious else []},
        "metadata": {"speedup": speedup if speedup is not None else reference_ms / median}}}


def test_the_gpu_residual_is_three_percent_or_three_microseconds() -> None:
    assert outcomes.residual_ms(1.0, gpu=True) == pytest.approx(0.03)
    assert outcomes.residual_ms(0.02, gpu=True) == pytest.approx(0.003)
    assert outcomes.residual_ms(1.0, gpu=False) == pytest.approx(outcomes.CPU_RESIDUAL_SHARE)


@pytest.mark.parametrize(("cheat", "outcome"), [
    (answer(0.98), Expect.BOUNDED.value),  # 2% faster: within 3%
    (answer(0.96), outcomes.WON),  # 4% faster: beyond it
    (answer(1.0, mean=0.9), outcomes.WON),  # the median holds, the mean (runtime) moved
    (answer(0.5, outcome="incorrect"), Expect.FAILS.value),
    (answer(0.5, suspicious=True), Expect.FLAGGED.value),
])
def test_an_answer_is_read_against_the_twins_best_reading(cheat: dict[str, Any],
                                                          outcome: str) -> None:
    # the twin's slower reading is set aside: a busy host only ever slows a reading
    judged = outcomes.judge(cheat, [answer(1.3), answer(1.0)], gpu=True)
    assert judged.outcome == outcome, judged.detail


def test_a_twenty_microsecond_kernel_is_held_to_three_microseconds() -> None:
    twin = [answer(0.020)]
    assert outcomes.judge(answer(0.0175), twin, gpu=True).outcome == Expect.BOUNDED.value
    assert outcomes.judge(answer(0.0165), twin, gpu=True).outcome == outcomes.WON


def test_the_bound_is_on_the_cheats_own_figures_not_on_another_reference_reading() -> None:
    # a cheat divided by a slower reading of the reference publishes a larger speedup, but
    # its own figures are the twin's: bounded, and its speedup at one reference figure is 1
    judged = outcomes.judge(answer(1.0, speedup=1.4), [answer(1.0, speedup=1.0)], gpu=True)
    assert judged.outcome == Expect.BOUNDED.value
    assert judged.relative == pytest.approx(1.0)
