"""Fixtures: the real server on a free localhost port, and the GPU marker's skip rule."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
START_DEADLINE_S = 120
RAY_ADDRESS_VAR = "KES_TEST_RAY_ADDRESS"
# With this set to a file's path, the id of each test that fails (in any phase) is appended to
# it, one per line: how a run that starts pytest itself learns which tests to run again
# (tests/ray/test_cluster.py)
FAILED_IDS_VAR = "KES_TEST_FAILED_IDS"
# A server runs in a session of its own, so a test run killed by a timeout would leave it
# running, with its workers and their GPU memory. util-linux's setpriv gives it SIGTERM (a
# graceful stop) when the process that started it dies.
STOP_WITH_STARTER = (["setpriv", "--pdeathsig", "TERM", "--"] if shutil.which("setpriv")
                     else [])


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = os.environ.get(FAILED_IDS_VAR)
    if path and report.failed:
        with open(path, "a", encoding="utf-8") as out:
            out.write(report.nodeid + "\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_spares(self, deadline_s: float = 120.0, steady_s: float = 3.0) -> int:
        """Wait until the pool has started its spares (/stats' ready count is above zero and
        has not changed for ``steady_s``); benches measure jobs, not the pool filling up.
        Returns the count."""
        end, last, since = time.monotonic() + deadline_s, -1, time.monotonic()
        while time.monotonic() < end:
            ready = int(httpx.get(f"{self.url}/stats", timeout=10).json().get("ready_workers", 0))
            if ready != last:
                last, since = ready, time.monotonic()
            elif ready > 0 and time.monotonic() - since >= steady_s:
                break
            time.sleep(0.25)
        return last

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def ray_env(state_dir: Path, address: str | None = None) -> dict[str, str]:
    """A server's settings to run its jobs on the Ray cluster at ``address``, by default
    ``$KES_TEST_RAY_ADDRESS``: with it set, every server the tests start does (as tests/ray/
    does for the end-to-end suite, on scripts/ray_local_cluster.py's cluster)."""
    address = address or os.environ.get(RAY_ADDRESS_VAR, "")
    if not address:
        return {}
    env = {"EXECUTOR": "ray", "RAY_ADDRESS": address, "RAY_NODE_DIR": str(state_dir / "ray-node"),
           "RAY_USAGE_STATS_ENABLED": "0"}
    if address.startswith("127."):  # the local cluster keeps Ray on loopback; so must we
        env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    return env


def start_server(state_dir: Path, extra_env: dict[str, str] | None = None) -> Server:
    """Start ``main.py`` on a free port with its state under ``state_dir``; wait for /health.

    ``KES_SERVER_ROOT`` (a benchmark's baseline) starts another checkout's server instead,
    with that checkout first on the path."""
    port = free_port()
    env = dict(os.environ)
    root = Path(os.environ.get("KES_SERVER_ROOT") or ROOT)
    if root != ROOT:
        env["PYTHONPATH"] = os.pathsep.join([str(root), str(root / "client"),
                                             env.get("PYTHONPATH", "")])
    env.update(
        PORT=str(port), HOST="127.0.0.1", LOG_LEVEL="info",
        JOB_STORE_PATH=str(state_dir / "jobs.sqlite3"), JOB_DIR=str(state_dir / "jobs"),
        CACHE_DIR=str(state_dir / "cache"), MAX_WORKERS="2",
        PYTHONUNBUFFERED="1",
    )
    if not cuda_available():
        env["DEVICE"] = "cpu"
    env.update(ray_env(state_dir))
    env.update(extra_env or {})
    state_dir.mkdir(parents=True, exist_ok=True)
    log_path = state_dir / f"server-{port}.log"
    proc = subprocess.Popen(
        [*STOP_WITH_STARTER, sys.executable, str(root / "main.py")], cwd=root, env=env,
        stdout=log_path.open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
    )
    server = Server(f"http://127.0.0.1:{port}", proc, log_path)
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{server.log()}")
        try:
            if httpx.get(f"{server.url}/health", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    server.stop(signal.SIGKILL)
    raise RuntimeError(f"server did not answer /health within {START_DEADLINE_S} s:\n{server.log()}")


@pytest.fixture(scope="session")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One real server for the session's end-to-end tests."""
    server = start_server(tmp_path_factory.mktemp("live-server"))
    yield server
    server.stop()


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Start servers of one's own (e.g. to restart one on the same job store)."""
    started: list[Server] = []

    def factory(state_dir: Path | None = None, **env: str) -> Server:
        server = start_server(state_dir or tmp_path, env)
        started.append(server)
        return server

    yield factory
    for server in started:
        server.stop(signal.SIGKILL)


@pytest.fixture(scope="session")
def client(live_server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_server.url, timeout=300) as c:
        yield c
