"""A pytest plugin that writes each failure as it happens (``-p scripts.pytest_live_failures``).

For runs cut off by a wall-clock limit, where pytest's own summary never gets printed: the
file named by ``LIVE_FAILURES`` (default ``live_failures.txt``) has every failure so far,
and one line per finished test.
"""

from __future__ import annotations

import os

import pytest


def _path() -> str:
    return os.environ.get("LIVE_FAILURES", "live_failures.txt")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call" and not report.failed:
        return
    with open(_path(), "a", encoding="utf-8") as f:
        f.write(f"{report.outcome.upper():7} {report.duration:7.1f}s {report.nodeid} [{report.when}]\n")
        if report.failed:
            f.write(report.longreprtext[-2500:] + "\n\n")
