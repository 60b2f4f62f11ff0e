"""The JIT store (orchestration/jit_store.py) and a job process's side of it
(harness/jit_cache.py): entries by exact source, handed over and back through descriptors,
capped and pruned."""

from __future__ import annotations

import io
import os
import tarfile
import threading
from pathlib import Path

import pytest

from harness.jit_cache import JitCaches, inventory
from orchestration.jit_store import JitStore
from shared.models import KernelCode
from shared.protocol import JIT_DIR_ENV, ExportJit, JitExported, Load

SOURCE = KernelCode(source_code="class ModelNew: pass", kernel_type="torch")


def store(tmp_path: Path, max_bytes: int = 1 << 20, fingerprint: str = "h100") -> JitStore:
    return JitStore(tmp_path / "store", max_bytes, fingerprint)


def send(data: bytes, into: JitStore, key: str) -> int:
    read_fd, write_fd = os.pipe()
    writer = threading.Thread(target=lambda: _write_all(write_fd, data))
    writer.start()
    kept = into.receive(read_fd, key)
    writer.join()
    return kept


def _write_all(fd: int, data: bytes) -> None:
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BrokenPipeError:
        pass


def export_into(jit: JitStore, key: str) -> tuple[JitExported, int]:
    """A process's export (of the caches under its KES_JIT_DIR) read by the store as the
    server reads it: (the process's reply, the bytes the store kept)."""
    read_fd, write_fd = os.pipe()
    kept: list[int] = []
    reader = threading.Thread(target=lambda: kept.append(jit.receive(read_fd, key)))
    reader.start()
    reply = JitCaches().export(ExportJit(send=True), [write_fd])
    reader.join()
    return reply, kept[0]


def tar_of(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_the_key_is_the_source_and_the_host_not_the_inputs(tmp_path: Path) -> None:
    jit = store(tmp_path)
    other_io = SOURCE.model_copy(update={"io": {"args": []}})
    assert jit.key(SOURCE) == jit.key(other_io)
    assert jit.key(SOURCE) != jit.key(SOURCE.model_copy(update={"source_code": "x = 1"}))
    assert jit.key(SOURCE) != store(tmp_path, fingerprint="h200").key(SOURCE)


def test_an_entry_comes_back_for_its_key_only(tmp_path: Path) -> None:
    jit = store(tmp_path)
    key = jit.key(SOURCE)
    data = tar_of({"triton/abc/kernel.cubin": b"x" * 100})
    assert jit.seed(key) is None
    assert send(data, jit, key) == len(data)
    fd = jit.seed(key)
    assert fd is not None
    with os.fdopen(fd, "rb") as f:
        assert f.read() == data
    assert jit.seed(jit.key(SOURCE.model_copy(update={"source_code": "y = 2"}))) is None


def test_an_entry_over_its_share_of_the_store_is_not_kept(tmp_path: Path) -> None:
    jit = store(tmp_path, max_bytes=40_000)  # an entry may hold a quarter: 10,000 bytes
    key = jit.key(SOURCE)
    assert send(tar_of({"big": os.urandom(20_000)}), jit, key) == 0
    assert jit.seed(key) is None
    assert not list((tmp_path / "store").rglob("*.tar"))
    assert not list((tmp_path / "store").rglob(".in-*"))


def test_the_store_drops_its_least_recently_used_entries_to_fit(tmp_path: Path) -> None:
    jit = store(tmp_path, max_bytes=45_000)  # four entries of a 10 KiB tar each fit, five not
    keys = [jit.key(SOURCE.model_copy(update={"source_code": f"v = {i}"})) for i in range(4)]
    for i, key in enumerate(keys):
        assert send(tar_of({"f": bytes(6_000)}), jit, key) > 0
        os.utime(jit.path(key), (1000 + i, 1000 + i))
    fd = jit.seed(keys[0])  # used now: the newest
    assert fd is not None
    os.close(fd)
    send(tar_of({"f": bytes(6_000)}), jit, jit.key(SOURCE))
    left = {p.stem for p in (tmp_path / "store").rglob("*.tar")}
    assert keys[0] in left and keys[1] not in left


def test_a_process_restores_an_entry_and_counts_only_what_it_compiled_since(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "jit"
    monkeypatch.setenv(JIT_DIR_ENV, str(root))
    read_fd, write_fd = os.pipe()
    _write_all(write_fd, tar_of({"triton/k/kernel.cubin": b"c" * 50}))
    caches = JitCaches()
    caches.seed(Load.model_construct(jit_seed=True), [read_fd])
    assert inventory(root) == {"triton/k/kernel.cubin": 50}
    assert caches.export(ExportJit(), []).added == 0
    (root / "tilelang").mkdir()
    (root / "tilelang" / "new.so").write_bytes(b"s")
    reply = caches.export(ExportJit(), [])
    assert (reply.files, reply.added, reply.sent) == (2, 1, 0)


def test_a_restore_never_writes_outside_the_cache_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "jit"
    monkeypatch.setenv(JIT_DIR_ENV, str(root))
    read_fd, write_fd = os.pipe()
    _write_all(write_fd, tar_of({"../outside.txt": b"escaped", "ok.txt": b"fine"}))
    caches = JitCaches()
    caches.seed(Load.model_construct(jit_seed=True), [read_fd])
    assert not (tmp_path / "outside.txt").exists()
    assert caches.restored == {}  # a damaged entry: the source compiles afresh


def test_an_export_writes_the_caches_as_a_tar_the_store_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "jit"
    (root / "cute_dsl").mkdir(parents=True)
    (root / "cute_dsl" / "kernel.o").write_bytes(b"o" * 300)
    monkeypatch.setenv(JIT_DIR_ENV, str(root))
    jit = store(tmp_path)
    reply, kept = export_into(jit, "k" * 64)
    assert reply.files == 1 and reply.sent > 300 and kept == reply.sent
    with tarfile.open(jit.path("k" * 64)) as tar:
        assert tar.getnames() == ["cute_dsl/kernel.o"]


def test_a_process_that_compiled_nothing_sends_nothing_to_keep(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(JIT_DIR_ENV, str(tmp_path / "jit"))  # never created: nothing compiled
    jit = store(tmp_path)
    reply, kept = export_into(jit, "e" * 64)
    assert (reply.files, reply.sent, kept) == (0, 0, 0)
    assert jit.seed("e" * 64) is None
