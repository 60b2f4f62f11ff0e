"""A job process's JIT caches (Triton, Inductor, CuTe DSL, TileLang, Helion, CuPy), in one
directory of the worker (``KES_JIT_DIR``; the worker pool points every compiler's cache
variable into it).

The server keeps them per source (orchestration/jit_store.py): a job whose exact source ran
before gets that job's caches restored here before its source is imported (:func:`restore`),
so its compilers find their work done; after a job, :func:`inventory` says what the source's
compilers added, and :func:`export` writes the directory as a tar to a pipe the server reads.
What comes back is only ever restored for the same source, so nothing one source writes here
reaches another's process.
"""

from __future__ import annotations

import contextlib
import os
import tarfile
from pathlib import Path

from shared.protocol import JIT_DIR_ENV, ExportJit, JitExported, Load


def jit_dir() -> Path | None:
    value = os.environ.get(JIT_DIR_ENV)
    return Path(value) if value else None


def inventory(root: Path | None) -> dict[str, int]:
    """Every regular file under ``root``, by relative path, with its size."""
    if root is None or not root.is_dir():
        return {}
    found: dict[str, int] = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            try:
                if path.is_file() and not path.is_symlink():
                    found[str(path.relative_to(root))] = path.stat().st_size
            except OSError:
                continue
    return found


def restore(fd: int, root: Path) -> dict[str, int]:
    """Unpack the tar read from ``fd`` (closed here) into ``root``; what it holds now."""
    root.mkdir(parents=True, exist_ok=True)
    with os.fdopen(fd, "rb") as stream, tarfile.open(fileobj=stream, mode="r|") as tar:
        tar.extractall(root, filter="data")  # nothing outside root, no links out, no devices
    return inventory(root)


def export(fd: int, root: Path, names: list[str]) -> int:
    """Write ``names`` (files under ``root``) as a tar stream to ``fd`` (closed here); the bytes
    written (0 when the reader stopped taking them: the server caps what it keeps)."""
    written = 0
    raw = os.fdopen(fd, "wb")

    class Counting:
        def write(self, data: bytes) -> int:
            nonlocal written
            raw.write(data)
            written += len(data)
            return len(data)

    try:
        with tarfile.open(fileobj=Counting(), mode="w|") as tar:  # type: ignore[call-overload]
            for name in names:
                tar.add(root / name, arcname=name, recursive=False)
        raw.close()
    except BrokenPipeError:
        with contextlib.suppress(OSError):
            raw.close()
        return 0
    return written


ADDED_NAMES = 5  # the first few of what a job compiled, named in its result


class JitCaches:
    """A session's side of the store: the restore before its source loads, the export after."""

    def __init__(self) -> None:
        self.restored: dict[str, int] = {}

    def seed(self, message: Load, fds: list[int]) -> None:
        root = jit_dir()
        if not (message.jit_seed and fds and root is not None):
            return
        try:
            self.restored = restore(fds.pop(0), root)
        except (OSError, tarfile.TarError):  # a damaged entry: the source compiles afresh
            self.restored = {}

    def export(self, message: ExportJit, fds: list[int]) -> JitExported:
        root = jit_dir()
        files = inventory(root)
        new = sorted(name for name, size in files.items() if self.restored.get(name) != size)
        sent = 0
        if message.send and fds:
            fd = fds.pop(0)
            if files and root is not None:
                sent = export(fd, root, sorted(files))
            else:  # nothing to keep: the reader sees the end at once
                os.close(fd)
        return JitExported(files=len(files), added=len(new), sent=sent,
                           added_names=new[:ADDED_NAMES])
