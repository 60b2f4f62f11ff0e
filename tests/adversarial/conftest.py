"""Fixtures of the adversarial corpus: the real server, started for these tests.

One server (two worker slots, single-threaded BLAS so that a starting spare worker does not
steal the timed job's core) serves the cheats and the honest kernels; every escape attempt
gets a server of its own, since a successful escape may kill or damage it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.adversarial.corpus import Target
from tests.conftest import Server, cuda_available, start_server

SERVER_ENV = {"MAX_WORKERS": "2", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
SETTLE_DEADLINE_S = 20.0
PREBUILD_DEADLINE_S = 300.0


@dataclass
class RunningServer:
    server: Server
    state_dir: Path
    client: httpx.Client

    def target(self) -> Target:
        return Target(
            gpu=cuda_available(), url=self.server.url, state_dir=self.state_dir,
            job_dir=self.state_dir / "jobs", token=uuid.uuid4().hex,
        )

    def settle(self) -> None:
        """Wait (with a deadline) until every slot has a ready worker again, so a job is not
        timed while the previous job's replacement worker is still importing torch."""
        deadline = time.monotonic() + SETTLE_DEADLINE_S
        while time.monotonic() < deadline:
            stats = self.client.get("/stats").json()
            if "ready_workers" not in stats or stats["ready_workers"] >= stats["worker_slots"]:
                return
            time.sleep(0.1)


def start(state_dir: Path, env: dict[str, str] | None = None) -> RunningServer:
    server = start_server(state_dir, {**SERVER_ENV, **(env or {})})
    return RunningServer(server, state_dir, httpx.Client(base_url=server.url, timeout=900))


def prebuild(running: RunningServer, cases: list[Any]) -> None:
    """Build every load_inline extension of the GPU cases about to run at once, before any
    test times.

    Each costs about a minute of nvcc; built one test at a time they would dominate the run.
    They build in parallel here (``/validate``, ``wait=false``) and the tests then find them
    in the server's build cache. Builds use the CPU only; they are all over before a timed test
    starts, so they never compete with one.
    """
    from tests.adversarial.corpus import Cheat, Honest

    target = running.target()
    built = [case for case in cases if isinstance(case, (Cheat, Honest)) and case.gpu]
    jobs = [case.build(target) for case in built]
    jobs += [case.honest(target) for case in built
             if isinstance(case, Cheat) and case.honest is not None]
    kernels = {json.dumps(k, sort_keys=True): k for job in jobs
               for k in (job.body.get("kernel"), job.body.get("custom_kernel"), job.body.get("ref_kernel"))
               if isinstance(k, dict) and k.get("kernel_type") == "torch_cuda"}
    ids = [running.client.post("/validate", params={"wait": "false"},
                               json={"kernel": k, "timeout": 600}).json()["job_id"]
           for k in kernels.values()]
    deadline = time.monotonic() + PREBUILD_DEADLINE_S
    while ids and time.monotonic() < deadline:
        ids = [i for i in ids
               if running.client.get(f"/job/{i}").json()["state"] in ("queued", "running")]
        time.sleep(1)


@pytest.fixture(scope="session")
def adversarial_server(request: pytest.FixtureRequest,
                       tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    # The speedup review flag (SPEEDUP_REVIEW_THRESHOLD) is a prompt for a human, not a
    # defence: off here, so every cheat must be caught by a check that would stop a search loop.
    running = start(tmp_path_factory.mktemp("adversarial"),
                    {"BUILD_WORKERS": "8", "SPEEDUP_REVIEW_THRESHOLD": "1e12"})
    if cuda_available():
        # the cases of the tests selected (a run narrowed by -k builds only what it times)
        prebuild(running, [item.callspec.params["case"] for item in request.session.items
                           if "case" in getattr(getattr(item, "callspec", None), "params", {})])
    yield running
    running.client.close()
    running.server.stop()


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[Callable[[], RunningServer]]:
    """A server of the test's own (for escapes, which may kill or damage it)."""
    started: list[RunningServer] = []

    def factory() -> RunningServer:
        running = start(tmp_path / f"server-{len(started)}")
        started.append(running)
        return running

    yield factory
    for running in started:
        running.client.close()
        running.server.stop()
