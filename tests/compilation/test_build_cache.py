"""The content-addressed build cache: stable keys, one build per key, no stale locks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from compilation.build_cache import cache_key, get_or_build, lookup

REPO = Path(__file__).resolve().parents[2]

# A builder process: it records that it built, leaves a partial file, says it has started,
# and finishes only when told to (the file `release` appears).
BUILDER = """
import json, os, sys, time
from pathlib import Path
from compilation.build_cache import get_or_build

root, key, log, started, release = sys.argv[1], sys.argv[2], *map(Path, sys.argv[3:6])

def build(directory):
    with open(log, "a") as f:
        f.write(f"{os.getpid()}\\n")
    (directory / "partial.o").write_text("half a build")
    started.touch()
    deadline = time.monotonic() + 60
    while not release.exists():
        if time.monotonic() > deadline:
            raise TimeoutError("never released")
        time.sleep(0.01)
    return {"pid": os.getpid()}

print("calling", flush=True)
result = get_or_build(Path(root), key, build)
print(json.dumps({"built": result.built, "info": result.info}), flush=True)
"""


def wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def start_builder(tmp_path: Path, key: str, tag: str) -> subprocess.Popen[str]:
    script = tmp_path / "builder.py"
    script.write_text(BUILDER)
    args = [str(tmp_path / "cache"), key, str(tmp_path / "builds.log"),
            str(tmp_path / f"started-{tag}"), str(tmp_path / "release")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE,
                            text=True, env=env, cwd=REPO)


def test_key_is_stable_and_content_addressed() -> None:
    key = cache_key("torch_ext", {"sources": ["a"], "flags": ["-O3"]}, "9.0")
    assert key == cache_key("torch_ext", {"flags": ["-O3"], "sources": ["a"]}, "9.0")
    assert key != cache_key("torch_ext", {"sources": ["b"], "flags": ["-O3"]}, "9.0")
    assert key != cache_key("torch_ext", {"sources": ["a"], "flags": ["-O3"]}, "8.0")
    # another interpreter (with its own hash seed) computes the same key
    code = ("from compilation.build_cache import cache_key; "
            "print(cache_key('torch_ext', {'sources': ['a'], 'flags': ['-O3']}, '9.0'))")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           cwd=REPO, env={**os.environ, "PYTHONHASHSEED": "123"}, check=True)
    assert other.stdout.strip() == key


def test_builds_once_then_serves_the_cached_result(tmp_path: Path) -> None:
    calls: list[Path] = []

    def build(directory: Path) -> dict[str, Any]:
        calls.append(directory)
        (directory / "lib.so").write_text("binary")
        return {"library": "lib.so"}

    assert lookup(tmp_path, "k") is None
    first = get_or_build(tmp_path, "k", build)
    second = get_or_build(tmp_path, "k", build)
    assert (first.built, second.built) == (True, False)
    assert len(calls) == 1
    assert second.info == {"library": "lib.so"}
    assert (second.path / "lib.so").read_text() == "binary"
    assert lookup(tmp_path, "k") == second


def test_a_failed_build_is_not_cached(tmp_path: Path) -> None:
    def failing(directory: Path) -> dict[str, Any]:
        (directory / "partial.o").write_text("x")
        raise RuntimeError("compiler error")

    with pytest.raises(RuntimeError, match="compiler error"):
        get_or_build(tmp_path, "k", failing)
    assert lookup(tmp_path, "k") is None

    def working(directory: Path) -> dict[str, Any]:
        assert not (directory / "partial.o").exists()  # the failed attempt was wiped
        return {"ok": True}

    assert get_or_build(tmp_path, "k", working).built


def test_two_processes_building_the_same_key_build_once(tmp_path: Path) -> None:
    first = start_builder(tmp_path, "same-key", "first")
    wait_for(lambda: (tmp_path / "started-first").exists())  # first holds the lock, building
    second = start_builder(tmp_path, "same-key", "second")
    assert second.stdout is not None
    assert second.stdout.readline().strip() == "calling"  # second is about to wait on the lock
    (tmp_path / "release").touch()
    results = [json.loads(p.communicate(timeout=60)[0].splitlines()[-1]) for p in (first, second)]
    assert [r["built"] for r in results] == [True, False]
    assert results[0]["info"] == results[1]["info"] == {"pid": first.pid}
    assert (tmp_path / "builds.log").read_text().split() == [str(first.pid)]
    assert not (tmp_path / "started-second").exists()


def test_a_builder_killed_mid_build_leaves_no_stale_lock(tmp_path: Path) -> None:
    victim = start_builder(tmp_path, "k", "victim")
    wait_for(lambda: (tmp_path / "started-victim").exists())
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)

    outcome: list[Any] = []

    def build(directory: Path) -> dict[str, Any]:
        outcome.append(sorted(p.name for p in directory.iterdir()))
        return {"rebuilt": True}

    worker = threading.Thread(
        target=lambda: outcome.append(get_or_build(tmp_path / "cache", "k", build)), daemon=True
    )
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "the lock of the killed builder was never released"
    files_seen_by_rebuild, result = outcome
    assert files_seen_by_rebuild == []  # the half-finished build was wiped
    assert result.built and result.info == {"rebuilt": True}
