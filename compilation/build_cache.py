"""A content-addressed cache of build outputs, shared by worker processes.

Building a ``load_inline`` extension costs about a minute of nvcc; the same source must
build once and then load in milliseconds, however many workers ask for it at once.

Layout, one directory per key under the cache root::

    <root>/<key>/lock           flock(2) target: whoever holds it may build
    <root>/<key>/build/         the builder's output directory
    <root>/<key>/complete.json  written (atomically) only after a build succeeded

A finished entry is never modified, so readers that see ``complete.json`` use ``build/``
without taking the lock. A builder killed half-way leaves no marker, and the kernel drops
its flock when the process dies, so the next caller takes the lock, wipes the partial
``build/`` and starts again: there is no stale lock to clean up.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.keys import content_key

__all__ = ["BuildResult", "cache_key", "get_or_build", "lookup"]

MARKER = "complete.json"
LOCK = "lock"
BUILD = "build"


@dataclass(frozen=True)
class BuildResult:
    """A finished build: where it is, what its builder recorded, and whether this call built it."""

    path: Path  # the entry's build directory
    info: dict[str, Any]  # what the build function returned (e.g. the library's file name)
    built: bool  # True when this call ran the build; False when it was already cached
    seconds: float  # time this call spent waiting for the lock and building


cache_key = content_key


def lookup(root: Path, key: str) -> BuildResult | None:
    """The finished build for ``key``, or None if there is none yet."""
    entry = Path(root) / key
    info = _read_marker(entry)
    if info is None:
        return None
    return BuildResult(entry / BUILD, info, built=False, seconds=0.0)


def get_or_build(
    root: Path, key: str, build: Callable[[Path], dict[str, Any]]
) -> BuildResult:
    """Return the cached build for ``key``, running ``build(directory)`` first if there is none.

    ``build`` receives an empty directory to write into and returns a JSON-able dict that
    is stored with the entry and handed back to every later caller. At most one process
    runs ``build`` for a key at a time; the others wait for it and then use its result. If
    ``build`` raises, nothing is cached and the exception propagates.
    """
    started = time.perf_counter()
    cached = lookup(root, key)
    if cached is not None:
        return cached
    entry = Path(root) / key
    entry.mkdir(parents=True, exist_ok=True)
    with _locked(entry / LOCK):
        # Someone else may have finished the build while we waited for the lock.
        info = _read_marker(entry)
        if info is not None:
            return BuildResult(entry / BUILD, info, False, time.perf_counter() - started)
        out = entry / BUILD
        if out.exists():
            shutil.rmtree(out)  # left by a builder that died or failed
        out.mkdir()
        info = build(out)
        _write_marker(entry, info)
        return BuildResult(out, info, True, time.perf_counter() - started)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())  # who builds, for a human looking at it
        yield
    finally:
        os.close(fd)  # closing drops the flock


def _read_marker(entry: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((entry / MARKER).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _write_marker(entry: Path, info: dict[str, Any]) -> None:
    tmp = entry / f".{MARKER}.{os.getpid()}"
    tmp.write_text(json.dumps(info))
    os.replace(tmp, entry / MARKER)
