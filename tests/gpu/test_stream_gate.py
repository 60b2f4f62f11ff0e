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


def test_a_run_reports_each_samples_launch_and_the_timers_own_for_the_host_bound_rule() -> None:
    """The figures the server's host-bound rule reads (profiling.integrity): each sample's
    enqueue time, the enqueue times of calls of no work, and a host interval of no work beside
    each host interval of the call; a launch made slow on purpose shows in them."""
    import time

    from harness.timer import EVENT_ZERO_SAMPLES, bind
    from profiling import integrity

    timer = bind("cuda")
    x = torch.randn(1024, device="cuda")

    def slow_launch() -> torch.Tensor:
        time.sleep(0.0003)
        return x + 1

    report = timer.run(slow_launch, 20, None)
    assert len(report.enqueue_ms) == len(report.event_ms) == 20
    assert len(report.null_enqueue_ms) == EVENT_ZERO_SAMPLES
    assert len(report.null_host_ms) == len(report.host_sync_ms) > 0
    launch = sorted(report.enqueue_ms)[10] - sorted(report.null_enqueue_ms)[EVENT_ZERO_SAMPLES // 2]
    assert 0.25 < launch < 2.0, (report.enqueue_ms, report.null_enqueue_ms)
    assert sorted(report.null_host_ms)[len(report.null_host_ms) // 2] < 0.1, report.null_host_ms
    # a 0.3 ms launch is beyond the 0.15 ms allowed: host-bound, as its judge would read it
    verdict = integrity.assess(report, 20, "cuda")
    assert verdict.host_bound and not verdict.report.suspicious, verdict.report.checks
