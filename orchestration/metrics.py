"""The server's Prometheus metrics, served as text at ``GET /metrics``.

One :class:`Metrics` per app, in a registry of its own (not prometheus-client's global one,
so two apps in one process, as in tests, do not share counters). The job manager reports
through its methods; values that are cheaper to read than to track (the queue length) are
read at scrape time by the refreshers registered with :meth:`Metrics.add_refresher`.

=========================================  =====================================================
``kernel_eval_jobs_queued_total``          jobs accepted, by ``kind``
``kernel_eval_jobs_rejected_total``        submissions refused with 429 (queue full), by ``kind``
``kernel_eval_jobs_total``                 jobs that reached a final state, by ``kind``, ``outcome``
``kernel_eval_queue_length``               jobs waiting for a device slot
``kernel_eval_stage_duration_seconds``     histogram of each job stage's duration, by ``stage``
``kernel_eval_gpu_busy_ratio``             share of time each GPU (or slot) ran a job, by ``gpu``
``kernel_eval_workers``                    worker processes, by ``state`` (starting, ready, busy)
``kernel_eval_cache_lookups_total``        cache lookups, by ``cache`` and ``result`` (hit, miss)
=========================================  =====================================================
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

log = logging.getLogger("kernel_eval.metrics")

CONTENT_TYPE = CONTENT_TYPE_LATEST
# From a cache hit's few milliseconds to a 10-minute job.
STAGE_BUCKETS_S = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)
POOL_STATES = ("starting", "ready", "busy")


class Metrics:
    """The metrics of one server, and the calls that move them."""

    def __init__(self) -> None:
        self._cache_seen: dict[tuple[str, str], int] = {}
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._queued = Counter(
            "kernel_eval_jobs_queued", "Jobs accepted, by kind.", ["kind"], registry=r
        )
        self._rejected = Counter(
            "kernel_eval_jobs_rejected",
            "Submissions refused because too many jobs were queued (HTTP 429), by kind.",
            ["kind"], registry=r,
        )
        self._finished = Counter(
            "kernel_eval_jobs",
            "Jobs that reached a final state, by kind and outcome (the kernel's verdict, "
            "'timeout', or 'server_error').",
            ["kind", "outcome"], registry=r,
        )
        self._queue_length = Gauge(
            "kernel_eval_queue_length", "Jobs waiting for a device slot.", registry=r
        )
        self._stages = Histogram(
            "kernel_eval_stage_duration_seconds", "Duration of each stage of a job.", ["stage"],
            buckets=STAGE_BUCKETS_S, registry=r,
        )
        self._gpu_busy = Gauge(
            "kernel_eval_gpu_busy_ratio",
            "Share of time (0-1) each GPU, or CPU device slot, has been running a job.",
            ["gpu"], registry=r,
        )
        self._workers = Gauge(
            "kernel_eval_workers", "Worker processes, by state.", ["state"], registry=r
        )
        self._cache = Counter(
            "kernel_eval_cache_lookups", "Cache lookups, by cache and result (hit or miss).",
            ["cache", "result"], registry=r,
        )
        self._refreshers: list[Callable[[], None]] = []

    # ---- jobs

    def job_queued(self, kind: str) -> None:
        """A job of ``kind`` (evaluate, compare, validate) was accepted."""
        self._queued.labels(kind=kind).inc()

    def job_rejected(self, kind: str) -> None:
        """A submission was refused because the queue was full."""
        self._rejected.labels(kind=kind).inc()

    def job_finished(self, kind: str, outcome: str, stage_ms: Mapping[str, float]) -> None:
        """A job reached a final state. ``stage_ms`` is the response's ``stage_timings``:
        stage name to milliseconds (recorded in seconds, as Prometheus wants)."""
        self._finished.labels(kind=kind, outcome=outcome).inc()
        for stage, ms in stage_ms.items():
            self._stages.labels(stage=stage).observe(max(ms, 0.0) / 1e3)

    def set_queue_length(self, n: int) -> None:
        self._queue_length.set(n)

    # ---- devices and workers

    def set_gpu_busy(self, gpu: int | str, share: float) -> None:
        """``share``: the fraction (0-1) of time the GPU or slot ``gpu`` has been running jobs."""
        self._gpu_busy.labels(gpu=str(gpu)).set(min(max(share, 0.0), 1.0))

    def set_pool_state(self, *, starting: int, ready: int, busy: int) -> None:
        """How many worker processes are starting, ready for a job, and running one."""
        for state, count in zip(POOL_STATES, (starting, ready, busy)):
            self._workers.labels(state=state).set(count)

    def cache_lookup(self, cache: str, hit: bool) -> None:
        """A lookup in ``cache`` (e.g. ``build``, ``reference``) hit or missed."""
        self._cache.labels(cache=cache, result="hit" if hit else "miss").inc()

    def set_cache_counts(self, counts: dict[str, dict[str, int]]) -> None:
        """Each cache's lookups and hits so far (``{"reference": {"hits", "lookups"}}``):
        the counters move by what changed since the last scrape."""
        for cache, c in counts.items():
            hits, misses = c.get("hits", 0), c.get("lookups", 0) - c.get("hits", 0)
            for result, now in (("hit", hits), ("miss", misses)):
                seen = self._cache_seen.get((cache, result), 0)
                if now > seen:
                    self._cache.labels(cache=cache, result=result).inc(now - seen)
                self._cache_seen[(cache, result)] = max(now, seen)

    # ---- scraping

    def add_refresher(self, refresh: Callable[[], None]) -> None:
        """Call ``refresh`` before each scrape, to set gauges read from live state."""
        self._refreshers.append(refresh)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric (:data:`CONTENT_TYPE`)."""
        for refresh in self._refreshers:
            try:
                refresh()
            except Exception:  # a broken gauge must not take the other metrics down
                log.exception("a metrics refresher failed")
        return generate_latest(self.registry)
