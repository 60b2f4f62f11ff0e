"""A worker's rehearsal takes every path of a job with the fewest warm-up calls (its 20-50 ms
warm-ups would only keep a core, or the GPU beside another job, busy), and leaves the timer's
warm-up as a job needs it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from harness.timer import WARMUP_LEAST_S, WARMUP_MIN_CALLS, WARMUP_S, Timer, bind
from shared.protocol import REHEARSE_ALL, REHEARSE_ALONE, REHEARSE_ENV


def test_a_timer_without_warm_up_time_still_calls_the_kernel_the_fewest_times() -> None:
    timer = bind("cpu")
    calls = []
    timer.warmup_s = 0.0
    done, _ = timer.warm_up(lambda: calls.append(1))
    assert done == len(calls) == WARMUP_MIN_CALLS


def test_a_timer_warms_up_for_its_warm_up_time_by_default() -> None:
    timer = bind("cpu")
    assert timer.warmup_s == WARMUP_S
    # a call of 1 ms: the warm-up runs its least time at least, long before its most calls
    done, spent_ms = timer.warm_up(lambda: time.sleep(0.001))
    assert done > WARMUP_MIN_CALLS
    assert spent_ms >= WARMUP_LEAST_S * 1e3


def watched_timer() -> tuple[Timer, list[float]]:
    """A CPU timer, and the warm-up time it had at each warm-up it was asked for."""
    timer = bind("cpu")
    seen: list[float] = []
    warm_up = timer.warm_up

    def watched(fn: Any, quick: bool = False) -> tuple[int, float]:
        seen.append(timer.warmup_s)
        return warm_up(fn, quick)

    timer.warm_up = watched  # type: ignore[method-assign]
    return timer, seen


def test_rehearsal_warms_up_with_no_warm_up_time_and_gives_the_timer_back_as_it_was(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from subprocess_worker import rehearse

    monkeypatch.chdir(tmp_path)
    timer, seen = watched_timer()
    rehearse("cpu", timer)
    # a comparison's timing (through the pair) and /evaluate's own
    assert seen == [0.0, 0.0]
    assert timer.warmup_s == WARMUP_S
    assert not (tmp_path / ".rehearsal").exists()


@pytest.mark.parametrize(("rehearse_env", "warm_ups"), [
    (None, 2),  # a comparison's timing, then /evaluate's own
    (REHEARSE_ALL, 2),
    (REHEARSE_ALONE, 1),  # /evaluate's own only: no judge, no pairing
])
def test_a_spare_made_for_a_kernel_alone_rehearses_no_comparison(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rehearse_env: str | None,
        warm_ups: int) -> None:
    import judge.session
    from subprocess_worker import rehearse

    monkeypatch.chdir(tmp_path)
    if rehearse_env is None:
        monkeypatch.delenv(REHEARSE_ENV, raising=False)
    else:
        monkeypatch.setenv(REHEARSE_ENV, rehearse_env)
    judges: list[object] = []
    made = judge.session.JudgeSession

    def counted(*args: Any) -> Any:
        judges.append(args)
        return made(*args)

    monkeypatch.setattr(judge.session, "JudgeSession", counted)
    timer, seen = watched_timer()
    rehearse("cpu", timer)
    assert len(seen) == warm_ups
    assert len(judges) == (0 if rehearse_env == REHEARSE_ALONE else 1)


def test_the_checks_rehearsal_compares_outputs_of_each_common_floating_dtype(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import validation.compare
    from subprocess_worker import CHECKED_DTYPES, _rehearse_checks

    compared: list[str] = []
    real = validation.compare.compare_outputs

    def recorded(custom: Any, reference: Any, *args: Any) -> str | None:
        compared.append(str(reference[0].dtype).removeprefix("torch."))
        return real(custom, reference, *args)

    monkeypatch.setattr(validation.compare, "compare_outputs", recorded)
    _rehearse_checks("cpu")
    assert compared == list(CHECKED_DTYPES) == ["float32", "float16", "bfloat16"]


def test_a_checks_rehearsal_whose_comparison_fails_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import validation.compare
    from subprocess_worker import _rehearse_checks

    monkeypatch.setattr(validation.compare, "compare_outputs",
                        lambda custom, reference, *a: "output: 3 of 256 elements differ")
    with pytest.raises(RuntimeError, match="float32 outputs failed: output: 3 of 256"):
        _rehearse_checks("cpu")
