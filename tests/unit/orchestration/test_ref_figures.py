"""Reference figures (orchestration.ref_cache.ReferenceFigures): taken once while others wait,
kept only when undisturbed, shared through the cache's directory."""

from __future__ import annotations

import asyncio
from pathlib import Path

from orchestration.ref_cache import Figure, ReferenceFigures
from tests.unit.orchestration.fakes import kernel_timed


def figure(ms: float, job: str = "j") -> Figure:
    return Figure(timed=kernel_timed([ms] * 5), timed_by_job=job)


def test_concurrent_askers_wait_for_the_first_measurement_and_share_it(tmp_path: Path) -> None:
    figures = ReferenceFigures(tmp_path, 2**20)
    measured: list[str] = []

    async def measure_as(job: str) -> tuple[Figure, bool]:
        measured.append(job)
        await asyncio.sleep(0.05)
        return figure(1.0, job), True

    async def scenario() -> list[object]:
        return await asyncio.gather(*(figures.get("k", lambda j=j: measure_as(j))
                                      for j in ("a", "b", "c")))

    found = asyncio.run(scenario())
    assert measured == ["a"]
    assert [f.figure.timed_by_job for f in found] == ["a", "a", "a"]  # type: ignore[attr-defined]
    assert [f.reused for f in found] == [False, True, True]  # type: ignore[attr-defined]


def test_a_disturbed_figure_is_nobodys_baseline(tmp_path: Path) -> None:
    figures = ReferenceFigures(tmp_path, 2**20)
    calls: list[int] = []

    async def disturbed() -> tuple[Figure, bool]:
        calls.append(1)
        return figure(9.0), False  # e.g. flagged, or measured again

    async def scenario() -> None:
        first = await figures.get("k", disturbed)
        assert not first.reused and not first.keep
        second = await figures.get("k", disturbed)
        assert not second.reused

    asyncio.run(scenario())
    assert len(calls) == 2 and not list(tmp_path.glob("*.json"))


def test_a_kept_figure_outlives_the_server_and_reuse_false_measures_anyway(
        tmp_path: Path) -> None:
    async def good() -> tuple[Figure, bool]:
        return figure(2.0, "first"), True

    asyncio.run(ReferenceFigures(tmp_path, 2**20).get("k", good))
    again = ReferenceFigures(tmp_path, 2**20)  # a restarted server, or another Ray slot
    found = asyncio.run(again.get("k", good))
    assert found.reused and found.figure.timed_by_job == "first"

    async def fresh() -> tuple[Figure, bool]:
        return figure(3.0, "mine"), True

    own = asyncio.run(again.get("k", fresh, reuse=False))
    assert not own.reused and own.figure.timed_by_job == "mine"


def test_a_cache_of_no_bytes_still_shares_within_the_server(tmp_path: Path) -> None:
    figures = ReferenceFigures(tmp_path, 0)
    calls: list[int] = []

    async def good() -> tuple[Figure, bool]:
        calls.append(1)
        return figure(2.0), True

    asyncio.run(figures.get("k", good))
    asyncio.run(figures.get("k", good))
    assert calls == [1] and not list(tmp_path.glob("*.json"))


def test_a_batch_shares_one_figure_even_a_disturbed_one_and_only_within_itself(
        tmp_path: Path) -> None:
    """Four candidates of one batch, the reference disturbed each time it is measured: one
    measurement, one figure for all four; another batch measures its own."""
    figures = ReferenceFigures(tmp_path, 2**20)
    calls: list[str] = []

    async def disturbed(job: str) -> tuple[Figure, bool]:
        calls.append(job)
        await asyncio.sleep(0.02)
        return figure(9.0 + len(calls), job), False

    async def scenario() -> list[object]:
        return await asyncio.gather(
            *(figures.get("k", lambda j=j: disturbed(j), batch="b1") for j in "abcd"),
            figures.get("k", lambda: disturbed("other"), batch="b2"))

    found = asyncio.run(scenario())
    assert sorted(calls) == ["a", "other"]
    ones = found[:4]
    assert {f.figure.timed_by_job for f in ones} == {"a"}  # type: ignore[attr-defined]
    assert [f.reused for f in ones] == [False, True, True, True]  # type: ignore[attr-defined]
    assert found[4].figure.timed_by_job == "other"  # type: ignore[attr-defined]
    # a disturbed figure is kept for nobody else: only under each batch's own key
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["k@b1.json", "k@b2.json"]


def test_a_batch_with_reuse_false_measures_once_for_itself(tmp_path: Path) -> None:
    figures = ReferenceFigures(tmp_path, 2**20)
    calls: list[int] = []

    async def good() -> tuple[Figure, bool]:
        calls.append(1)
        return figure(2.0), True

    async def scenario() -> None:
        for _ in range(3):
            await figures.get("k-b1", good, reuse=False, batch="b1")

    asyncio.run(scenario())
    assert len(calls) == 1 and [p.name for p in tmp_path.glob("*.json")] == ["k-b1@b1.json"]


def test_a_batch_run_on_two_servers_of_one_directory_has_one_figure(tmp_path: Path) -> None:
    """A Ray node's slots share the cache's directory: the batch's candidates on the second
    slot read the first slot's figure, a disturbed one too."""
    calls: list[str] = []

    async def disturbed(slot: str) -> tuple[Figure, bool]:
        calls.append(slot)
        await asyncio.sleep(0.05)
        return figure(9.0, slot), False

    async def scenario() -> list[object]:
        first, second = ReferenceFigures(tmp_path, 2**20), ReferenceFigures(tmp_path, 2**20)
        return await asyncio.gather(first.get("k", lambda: disturbed("one"), batch="b"),
                                    second.get("k", lambda: disturbed("two"), batch="b"))

    found = asyncio.run(scenario())
    assert len(calls) == 1
    assert len({f.figure.timed_by_job for f in found}) == 1  # type: ignore[attr-defined]
    assert not list(tmp_path.glob("*@*.lock"))  # the batch's lock file is gone with it


def test_only_the_recent_batches_figures_and_locks_are_kept(tmp_path: Path) -> None:
    from orchestration.ref_cache import RECENT

    figures = ReferenceFigures(tmp_path, 2**20)

    async def good() -> tuple[Figure, bool]:
        return figure(2.0), False

    async def scenario() -> None:
        for n in range(RECENT + 5):
            await figures.get("k", good, batch=f"b{n}")

    asyncio.run(scenario())
    assert len(figures._batches) == RECENT
    assert sum(1 for key in figures._locks if "@" in key) == RECENT
