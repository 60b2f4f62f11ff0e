"""What the server records of a reference run for reuse (real executor, CPU mode).

A reference is stored whole or not at all: one whose trials do not all fit the cache's entry
is never copied out and written in part first, and one that fits is stored and reused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestration import ref_cache
from orchestration.executor import LocalExecutor
from shared.models import KernelCode, WorkerJob, WorkerResult
from tests.unit.conftest import cpu_executor

ENTRY_BYTES = 1 << 20  # the cache's budget / 4


@pytest.fixture(scope="module")
def executor(tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[tuple[asyncio.AbstractEventLoop, LocalExecutor]]:
    with cpu_executor(tmp_path_factory.mktemp("recording"),
                      ref_cache_bytes=4 * ENTRY_BYTES) as running:
        yield running


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The trial numbers the server copied into a recorder."""
    trials: list[int] = []
    add_trial = ref_cache.Recorder.add_trial

    def spy(self: ref_cache.Recorder, trial: int, *args: Any) -> None:
        trials.append(trial)
        add_trial(self, trial, *args)

    monkeypatch.setattr(ref_cache.Recorder, "add_trial", spy)
    return trials


def compare(executor: tuple[asyncio.AbstractEventLoop, LocalExecutor], tmp_path: Path,
            elements: int) -> WorkerResult:
    loop, ex = executor
    source = (f"class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 3\n\n"
              f"def get_inputs():\n    return [torch.randn({elements})]\n\n"
              "def get_init_inputs():\n    return []\n")
    job = WorkerJob(
        job_id="t", kind="compare", kernel=KernelCode(source_code=source.replace("Model", "ModelNew"),
                                                       kernel_type="torch"),
        ref_kernel=KernelCode(source_code=source, kernel_type="torch"), num_trials=3,
        num_correct_trials=3, device="cpu", work_dir=str(tmp_path / "job"),
        cache_dir=str(tmp_path / "cache"),
    )

    async def no_progress(message: str, fraction: float) -> None:
        pass

    return loop.run_until_complete(ex.run(job, 120, no_progress))


def test_a_reference_whose_trials_do_not_all_fit_is_never_written_in_part(
        executor: Any, tmp_path: Path, recorded: list[int]) -> None:
    # in + out per trial: 2 × 4 bytes × 40 000 = 320 KB; one trial fits the 1 MiB entry,
    # four trials (three and the recheck) do not
    result = compare(executor, tmp_path, 40_000)
    assert result.kernel_exec_result.correctness is True, result
    assert recorded == []
    again = compare(executor, tmp_path, 40_000)
    assert again.kernel_exec_result.metadata["reference_reused"] is False


def test_a_reference_that_fits_is_recorded_whole_and_reused(
        executor: Any, tmp_path: Path, recorded: list[int]) -> None:
    result = compare(executor, tmp_path, 4_000)  # 32 KB per trial
    assert result.kernel_exec_result.correctness is True, result
    assert sorted(recorded) == [0, 1, 2, 3]  # three trials and the recheck
    again = compare(executor, tmp_path, 4_000)
    assert again.kernel_exec_result.correctness is True
    assert again.kernel_exec_result.metadata["reference_reused"] is True
