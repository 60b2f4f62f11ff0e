"""The timer's lead on a GPU (harness.stream_gate): the stream held until the call is
enqueued, released by the host, or by the watchdog when the call synchronises inside."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu]


def test_a_gated_sample_holds_the_gpus_work_not_the_hosts_enqueueing() -> None:
    """The host takes 1 ms to enqueue a microsecond kernel: the events hold the kernel only
    (a fixed 0.5 ms GPU sleep would have left half of that millisecond in them)."""
    import time

    from harness.timer import bind

    timer = bind("cuda")
    assert timer.lead == "stream_gate"
    x = torch.randn(1024, device="cuda")

    def slow_to_enqueue() -> torch.Tensor:
        time.sleep(0.001)
        return x + 1

    samples = [timer.sample(slow_to_enqueue, flush=False)[0] for _ in range(5)]
    assert sorted(samples)[2] < 0.2, samples


def test_a_call_that_synchronises_inside_is_released_by_the_watchdog() -> None:
    from harness.stream_gate import WATCHDOG_S
    from harness.timer import bind

    timer = bind("cuda")
    x = torch.randn(1024, device="cuda")
    float((x * 2).sum().item())  # the first call loads its modules (tens of ms)
    ms, value = timer.sample(lambda: float((x * 2).sum().item()), flush=False)
    assert value == pytest.approx(float((x * 2).sum()), rel=1e-4)
    assert ms < 1000 * WATCHDOG_S + 50  # waited for the watchdog, not forever


def test_the_timers_reading_of_no_work_is_a_microsecond_or_two_below_the_servers_cap() -> None:
    """The events around nothing (what the server subtracts from each sample): above zero,
    below the cap, and below the events around the smallest kernel."""
    from harness.timer import bind
    from profiling.integrity import EVENT_ZERO_MAX_MS

    timer = bind("cuda")
    x = torch.empty(1, device="cuda")
    timer.warm_up(x.zero_)
    assert 0 < timer.event_zero_ms < EVENT_ZERO_MAX_MS
    smallest = sorted(timer.sample(x.zero_, flush=False)[0] for _ in range(11))[5]
    assert timer.event_zero_ms < smallest
