"""GPU workers' malloc asks for transparent huge pages (glibc.malloc.hugetlb=1 in the GPU
zygote's GLIBC_TUNABLES, kept by every worker it forks), so that a job process's exit frees
its host memory in 2 MB pages; an operator's own value stands, and CPU and build zygotes are
left as they are."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestration.worker_pool import HUGE_PAGES_TUNABLE, PoolKey, WorkerPool, with_huge_pages
from shared.settings import Settings

THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def test_huge_pages_are_added_to_an_operators_other_tunables() -> None:
    assert with_huge_pages("") == f"{HUGE_PAGES_TUNABLE}=1"
    assert with_huge_pages("glibc.malloc.arena_max=2") == \
        f"glibc.malloc.arena_max=2:{HUGE_PAGES_TUNABLE}=1"


def test_an_operators_own_huge_pages_tunable_stands() -> None:
    assert with_huge_pages(f"{HUGE_PAGES_TUNABLE}=0") == f"{HUGE_PAGES_TUNABLE}=0"
    assert with_huge_pages(f"glibc.malloc.arena_max=2:{HUGE_PAGES_TUNABLE}=0") == \
        f"glibc.malloc.arena_max=2:{HUGE_PAGES_TUNABLE}=0"


def test_only_the_gpu_zygote_asks_for_huge_pages(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    gpu = WorkerPool(Settings(job_dir=tmp_path / "gpu"), "cuda")
    cpu = WorkerPool(Settings(job_dir=tmp_path / "cpu"), "cpu")
    try:
        assert gpu.zygote_env(PoolKey(0))["GLIBC_TUNABLES"] == f"{HUGE_PAGES_TUNABLE}=1"
        assert "GLIBC_TUNABLES" not in gpu.zygote_env(PoolKey(None, build=True))
        assert "GLIBC_TUNABLES" not in cpu.zygote_env(PoolKey(None))
    finally:
        gpu.blocking.close()
        cpu.blocking.close()


def _huge_kb_after_malloc(env: dict[str, str]) -> int:
    """AnonHugePages of a fresh interpreter that malloc'd and touched 64 MB."""
    code = ("import ctypes, re\n"
            "libc = ctypes.CDLL(None); libc.malloc.restype = ctypes.c_void_p\n"
            "n = 64 << 20; p = libc.malloc(n); ctypes.memset(p, 1, n)\n"
            "smaps = open('/proc/self/smaps').read()\n"
            "print(sum(int(k) for k in re.findall(r'AnonHugePages:\\s+(\\d+)', smaps)))\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True, timeout=60)
    return int(out.stdout.strip())


@pytest.mark.skipif(not THP_ENABLED.exists() or "[never]" in THP_ENABLED.read_text(),
                    reason="this host grants no transparent huge pages")
def test_a_process_started_with_the_gpu_zygotes_tunables_gets_huge_pages(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    gpu = WorkerPool(Settings(job_dir=tmp_path / "gpu"), "cuda")
    try:
        tunables = gpu.zygote_env(PoolKey(0))["GLIBC_TUNABLES"]
    finally:
        gpu.blocking.close()
    plain = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    huge = _huge_kb_after_malloc({**plain, "GLIBC_TUNABLES": tunables})
    assert huge >= 32 * 1024, f"only {huge} kB of the 64 MB malloc'd came in huge pages"
    if "[madvise]" in THP_ENABLED.read_text():  # without the tunable, none is asked for
        assert _huge_kb_after_malloc(plain) < huge
