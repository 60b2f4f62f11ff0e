"""Carrying the kernel languages' wheels to the GPU host in batches (scripts/dsl_wheelhouse.py):
cut into batches no larger than a device call carries, joined and checked again on the host."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dsl_wheelhouse",
                                                  ROOT / "scripts" / "dsl_wheelhouse.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


wheelhouse = load()


def wheels(tmp_path: Path, sizes: dict[str, int]) -> list[Path]:
    out = []
    for name, size in sizes.items():
        path = tmp_path / "wheels" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size))
        out.append(path)
    return out


def batch_dirs(dest: Path) -> list[Path]:
    return sorted(dest.glob("batch-*"))


def test_batches_stay_under_the_limit_and_a_large_wheel_travels_in_parts(tmp_path: Path) -> None:
    made = wheels(tmp_path, {"big-1.0-py3-none-any.whl": 2500, "mid-1.0-py3-none-any.whl": 700,
                             "small-1.0-py3-none-any.whl": 200})
    dest = tmp_path / "out"
    wheelhouse.pack(made, dest, 1000)
    batches = batch_dirs(dest)
    for batch in batches:
        files = [p for p in batch.iterdir() if p.name != wheelhouse.MANIFEST]
        assert sum(p.stat().st_size for p in files) <= 1000
    parts = sorted(p.name for b in batches for p in b.glob("big-*.part*"))
    assert parts == [f"big-1.0-py3-none-any.whl.part{k:02d}" for k in range(3)]
    manifest = json.loads((batches[0] / wheelhouse.MANIFEST).read_text())
    assert manifest["batches"] == len(batches)
    assert set(manifest["wheels"]) == {p.name for p in made}


def test_the_stage_joins_the_parts_into_the_same_wheels_once_every_batch_is_there(
        tmp_path: Path) -> None:
    made = wheels(tmp_path, {"big-1.0-py3-none-any.whl": 2500, "small-1.0-py3-none-any.whl": 300})
    dest, stage = tmp_path / "out", tmp_path / "stage"
    wheelhouse.pack(made, dest, 1000)
    batches = batch_dirs(dest)
    for batch in batches[:-1]:
        wheelhouse.gather(batch, stage)
    assert not wheelhouse.status(stage)  # one batch still to come
    wheelhouse.gather(batches[-1], stage)
    assert wheelhouse.status(stage)
    joined = {p.name: p.read_bytes() for p in wheelhouse.join(stage)}
    assert joined == {p.name: p.read_bytes() for p in made}


def test_a_damaged_part_is_refused_by_its_checksum(tmp_path: Path) -> None:
    made = wheels(tmp_path, {"big-1.0-py3-none-any.whl": 2500})
    dest, stage = tmp_path / "out", tmp_path / "stage"
    wheelhouse.pack(made, dest, 1000)
    for batch in batch_dirs(dest):
        wheelhouse.gather(batch, stage)
    part = next(stage.glob("*.part01"))
    part.write_bytes(b"x" + part.read_bytes()[1:])
    with pytest.raises(SystemExit, match="SHA-256"):
        wheelhouse.join(stage)


def test_requirements_are_read_for_the_host_with_the_extras_asked(tmp_path: Path) -> None:
    import zipfile

    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("pkg-1.0.dist-info/METADATA", (
            "Name: pkg\n"
            "Requires-Dist: base-lib==1.0\n"
            'Requires-Dist: gpu-lib; extra == "cu13"\n'
            'Requires-Dist: mac-only; platform_system == "Darwin"\n'
            'Requires-Dist: old-py; python_version < "3.10"\n'))
    assert wheelhouse.wheel_requirements(wheel, []) == ["base-lib==1.0"]
    assert wheelhouse.wheel_requirements(wheel, ["cu13"]) == ["base-lib==1.0", "gpu-lib"]
    assert wheelhouse.requirement_name("nvidia-cutlass-dsl[cu13]") == ("nvidia-cutlass-dsl",
                                                                       ["cu13"])
    assert "torch" in wheelhouse.host_packages()
