"""Metrics: each call moves its own series, in a registry of the app's own."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from orchestration.metrics import Metrics


def samples(metrics: Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the rendered text, keyed by (name, labels)."""
    text = metrics.render().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return samples(metrics).get((name, frozenset(labels.items())))


def test_finished_jobs_are_counted_by_kind_and_outcome() -> None:
    m = Metrics()
    m.job_finished("evaluate", "success", {})
    m.job_finished("evaluate", "success", {})
    m.job_finished("compare", "incorrect", {})
    assert value(m, "kernel_eval_jobs_total", kind="evaluate", outcome="success") == 2
    assert value(m, "kernel_eval_jobs_total", kind="compare", outcome="incorrect") == 1
    assert value(m, "kernel_eval_jobs_total", kind="compare", outcome="success") is None


def test_stage_durations_are_recorded_in_seconds_in_their_buckets() -> None:
    m = Metrics()
    m.job_finished("evaluate", "success", {"compile": 300.0, "profile": 4000.0})  # ms
    m.job_finished("evaluate", "success", {"compile": 20_000.0})
    name = "kernel_eval_stage_duration_seconds"
    assert value(m, f"{name}_count", stage="compile") == 2
    assert value(m, f"{name}_sum", stage="compile") == 20.3
    assert value(m, f"{name}_bucket", stage="compile", le="0.5") == 1
    assert value(m, f"{name}_bucket", stage="compile", le="30.0") == 2
    assert value(m, f"{name}_count", stage="profile") == 1


def test_queued_and_rejected_jobs_are_counted_by_kind() -> None:
    m = Metrics()
    m.job_queued("evaluate")
    m.job_rejected("compare")
    m.job_rejected("compare")
    assert value(m, "kernel_eval_jobs_queued_total", kind="evaluate") == 1
    assert value(m, "kernel_eval_jobs_rejected_total", kind="compare") == 2


def test_gauges_hold_the_last_value_set() -> None:
    m = Metrics()
    m.set_queue_length(4)
    m.set_queue_length(2)
    m.set_gpu_busy(0, 0.25)
    m.set_gpu_busy(1, 1.7)  # a share is clamped to 0..1
    m.set_pool_state(starting=1, ready=2, busy=3)
    assert value(m, "kernel_eval_queue_length") == 2
    assert value(m, "kernel_eval_gpu_busy_ratio", gpu="0") == 0.25
    assert value(m, "kernel_eval_gpu_busy_ratio", gpu="1") == 1.0
    assert [value(m, "kernel_eval_workers", state=s) for s in ("starting", "ready", "busy")] == [
        1, 2, 3
    ]


def test_cache_lookups_are_counted_as_hits_and_misses() -> None:
    m = Metrics()
    m.cache_lookup("build", hit=True)
    m.cache_lookup("build", hit=False)
    m.cache_lookup("build", hit=True)
    assert value(m, "kernel_eval_cache_lookups_total", cache="build", result="hit") == 2
    assert value(m, "kernel_eval_cache_lookups_total", cache="build", result="miss") == 1


def test_refreshers_run_at_every_scrape_and_a_failing_one_breaks_nothing() -> None:
    m = Metrics()
    queue = [5]

    def broken() -> None:
        raise RuntimeError("boom")

    m.add_refresher(broken)
    m.add_refresher(lambda: m.set_queue_length(queue[0]))
    assert value(m, "kernel_eval_queue_length") == 5
    queue[0] = 9
    assert value(m, "kernel_eval_queue_length") == 9


def test_two_instances_do_not_share_series() -> None:
    a, b = Metrics(), Metrics()
    a.job_queued("evaluate")
    assert value(a, "kernel_eval_jobs_queued_total", kind="evaluate") == 1
    assert value(b, "kernel_eval_jobs_queued_total", kind="evaluate") is None
