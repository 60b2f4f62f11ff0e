"""The JIT compilers' caches, kept per exact source: a second job of a source compiles nothing.

Triton, Inductor, CuPy, CuTe DSL, TileLang and Helion compile in the job's process, at import or
at the first call, into cache directories the worker pool puts in one directory of the worker
(``KES_JIT_DIR``, gone with the worker). After a job, the server asks the process for them as a
tar through a pipe (orchestration/flows/jit.py) and files it under the job's source
(:meth:`JitStore.receive`); before the next job of that same source loads, the file is handed
to its process as a read-only descriptor (:meth:`JitStore.seed`) and unpacked there first.

Trust: what is filed was written by the job's own (untrusted) process, so an entry is only ever
handed back to a process that runs the very same source, under a key the server computes from
the source, the kernel type and this host's compilers (:meth:`JitStore.key`): one source's
process never sees another's files. The store is hidden from every worker; an entry is capped
(``MAX_ENTRY_SHARE`` of the store) and the store is pruned oldest-used first.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
from importlib import metadata
from pathlib import Path

from shared.languages import versions
from shared.models import KernelCode

MAX_ENTRY_SHARE = 0.25  # one source's caches may fill at most this share of the store
READ_CHUNK = 1 << 20


def environment_fingerprint(device: str, capability: str | None) -> str:
    """What the compiled caches depend on beyond the source: the device and the compilers."""
    found: dict[str, str | None] = {"device": device, "capability": capability}
    for dist in ("torch", "triton", "cupy-cuda13x", "cupy-cuda12x"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = None
    found.update(versions())
    return json.dumps(found, sort_keys=True)


class JitStore:
    def __init__(self, root: Path, max_bytes: int, fingerprint: str) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.fingerprint = fingerprint
        self._lock = threading.Lock()
        self._total: int | None = None  # the entries' bytes, once counted
        self.restored = 0  # jobs that got an entry
        self.kept = 0  # entries filed

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def key(self, kernel: KernelCode) -> str:
        """The entry of ``kernel``'s source on this host (its inputs do not count: a compiler
        keys its cache by shapes itself)."""
        what = kernel.model_dump(mode="json", exclude={"io"})
        blob = json.dumps([what, self.fingerprint], sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.tar"

    def seed(self, key: str) -> int | None:
        """A read-only descriptor of ``key``'s entry (marked as used), or None."""
        path = self.path(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        with contextlib.suppress(OSError):
            os.utime(path)
        self.restored += 1
        return fd

    def receive(self, read_fd: int, key: str) -> int:
        """Read a tar from ``read_fd`` (closed here) into ``key``'s entry, up to the entry cap;
        the bytes filed (0: nothing came, or more than the cap, which is not kept)."""
        cap = int(self.max_bytes * MAX_ENTRY_SHARE)
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        size = 0
        tmp_fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=".in-")
        try:
            with os.fdopen(read_fd, "rb", buffering=0) as pipe, os.fdopen(tmp_fd, "wb") as tmp:
                while chunk := pipe.read(READ_CHUNK):
                    size += len(chunk)
                    if size > cap:
                        break
                    tmp.write(chunk)
            if size == 0 or size > cap:
                return 0
            with self._lock:
                try:
                    replaced = target.stat().st_size
                except FileNotFoundError:
                    replaced = 0
                os.replace(tmp_name, target)
                if self._total is not None:
                    self._total += size - replaced
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp_name)
        self.kept += 1
        if self._total is None or self._total > self.max_bytes:
            self.prune()  # (a scan of the store: only when it may be over its bytes)
        return size

    def prune(self) -> None:
        """Remove the least recently used entries until the store fits its bytes."""
        with self._lock:
            entries = []
            for path in self.root.glob("*/*.tar"):
                with contextlib.suppress(FileNotFoundError):
                    st = path.stat()
                    entries.append((st.st_mtime, st.st_size, path))
            total = sum(size for _, size, _ in entries)
            for _, size, path in sorted(entries):
                if total <= self.max_bytes:
                    break
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                total -= size
            self._total = total

    def stats(self) -> dict[str, int]:
        """For /stats: entries handed back and entries filed (counts, summed over a cluster's
        slots)."""
        return {"restored": self.restored, "kept": self.kept}
