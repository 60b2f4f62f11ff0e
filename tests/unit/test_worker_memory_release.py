"""When a job process gives its cached GPU memory back (subprocess_worker.must_release): only
where it holds a fair amount and the GPU is short of free memory; otherwise the release only
costs the process's next request an allocation."""

from __future__ import annotations

from subprocess_worker import RELEASE_CACHED_BYTES, must_release

GB = 2**30


def test_cached_memory_is_kept_while_the_gpu_has_plenty_free() -> None:
    assert not must_release(4 * GB, free=70 * GB, total=80 * GB)


def test_cached_memory_goes_back_when_the_gpu_runs_short() -> None:
    assert must_release(4 * GB, free=30 * GB, total=80 * GB)


def test_a_small_cache_is_kept_even_on_a_full_gpu() -> None:
    assert not must_release(RELEASE_CACHED_BYTES, free=1 * GB, total=80 * GB)
