"""Carry the kernel languages (CuTe DSL, TileLang, Helion, cuTile) to the lent GPU host, which
has no network, in device calls that each carry at most 64 MiB (docs/GPU_HOST.md).

Here (with network):

    python scripts/dsl_wheelhouse.py build [--dest .whl-dsl] [--batch-mb 60]

downloads the wheels for the host's Python (3.12, Linux x86-64) with the dependencies the host
image does not have (the list in scripts/build_wheelhouse.sh), cuts every wheel larger than a
batch into parts, and packs wheels and parts into batch directories of at most ``--batch-mb``
each (``.whl-dsl/batch-01``, ...), each with a manifest of what it holds and the SHA-256 of
every whole wheel.

On the host, one device call per batch, each within the 30 s a warm machine waits for the next
(carry ``.whl-dsl/batch-NN`` in that call):

    python3 scripts/dsl_wheelhouse.py gather .whl-dsl/batch-NN [--stage /var/tmp/kes-dsl]

copies the batch outside the copied tree, where the next call still finds it; then

    python3 scripts/dsl_wheelhouse.py install [--stage ...] [--site /opt/kes-dsl]

joins the parts, checks every wheel against its SHA-256, and installs them all into ``--site``
(``pip install --no-index --no-deps --target``); scripts/gpu_host_run.sh puts that directory
on the path when it exists. ``status`` says which batches the stage holds and what is missing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# what the languages' extras install (pyproject.toml: dsl); cu13: the host's CUDA 13 libraries
# helion: 1.5 imports what only torch 2.12 has (torch._inductor's IntelGPUError), and its
# metadata does not say so; 1.4.0 imports on the host's torch 2.11
TOP = ["nvidia-cutlass-dsl[cu13]", "tilelang", "helion==1.4.0", "cuda-tile"]
HOST_PYTHON = ["--python-version", "3.12", "--implementation", "cp", "--abi", "cp312",
               "--abi", "abi3", "--abi", "none"]
HOST_PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                  "manylinux2014_x86_64", "linux_x86_64", "any"]
MANIFEST = "manifest.json"
PART = ".part"


def norm(name: str) -> str:
    from packaging.utils import canonicalize_name

    return str(canonicalize_name(name))


def host_packages() -> set[str]:
    """What the GPU host's image already has (scripts/build_wheelhouse.sh keeps the list)."""
    text = (ROOT / "scripts" / "build_wheelhouse.sh").read_text()
    found = re.search(r'HOST_PKGS="([^"]*)"', text)
    if found is None:
        raise SystemExit("scripts/build_wheelhouse.sh has no HOST_PKGS list")
    return {norm(n) for n in found.group(1).split()}


def requirement_name(spec: str) -> tuple[str, list[str]]:
    """(project name, extras) of a requirement string."""
    from packaging.requirements import Requirement

    req = Requirement(spec)
    return req.name, sorted(req.extras)


def wheel_requirements(wheel: Path, extras: list[str]) -> list[str]:
    """The wheel's requirements for the host (Linux, CPython 3.12) and the ``extras`` asked."""
    from packaging.markers import Marker
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode()
    env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64",
           "implementation_name": "cpython", "platform_python_implementation": "CPython",
           "os_name": "posix"}
    out = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        marker: Marker | None = req.marker
        wanted = marker is None or any(
            marker.evaluate({**env, "extra": extra}) for extra in [*extras, ""])
        if wanted:
            out.append(f"{req.name}{'[' + ','.join(sorted(req.extras)) + ']' if req.extras else ''}"
                       f"{req.specifier}")
    return out


def download(spec: str, dest: Path) -> Path:
    before = set(dest.glob("*.whl"))
    platforms = [arg for p in HOST_PLATFORMS for arg in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    *HOST_PYTHON, *platforms, "-d", str(dest), "--quiet", spec], check=True)
    new = set(dest.glob("*.whl")) - before
    name = norm(requirement_name(spec)[0])
    for wheel in sorted(new or dest.glob("*.whl")):
        if norm(wheel.name.split("-")[0]) == name:
            return wheel
    raise SystemExit(f"pip downloaded no wheel of {spec}")


def build(dest: Path, batch_mb: int) -> None:
    host = host_packages()
    wheels_dir = dest / "wheels"
    wheels_dir.mkdir(parents=True, exist_ok=True)
    todo, seen = list(TOP), set()
    while todo:
        spec = todo.pop(0)
        name, extras = requirement_name(spec)
        if norm(name) in seen or norm(name) in host:
            continue
        seen.add(norm(name))
        wheel = download(spec, wheels_dir)
        print(f"  {wheel.name} ({wheel.stat().st_size / 2**20:.1f} MiB)")
        todo += wheel_requirements(wheel, extras)
    pack(sorted(wheels_dir.glob("*.whl")), dest, batch_mb * 2**20)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pack(wheels: list[Path], dest: Path, limit: int) -> None:
    """Wheels and parts of wheels into batch directories of at most ``limit`` bytes each."""
    for old in dest.glob("batch-*"):
        shutil.rmtree(old)
    pieces: list[tuple[str, bytes | Path, int]] = []  # (file name, content or whole file, size)
    digests = {}
    for wheel in wheels:
        digests[wheel.name] = sha256(wheel)
        size = wheel.stat().st_size
        if size <= limit:
            pieces.append((wheel.name, wheel, size))
            continue
        with wheel.open("rb") as f:
            for k, chunk in enumerate(iter(lambda: f.read(limit), b"")):
                pieces.append((f"{wheel.name}{PART}{k:02d}", chunk, len(chunk)))
    batches: list[list[tuple[str, bytes | Path, int]]] = []
    for piece in sorted(pieces, key=lambda p: -p[2]):  # first fit, largest first
        for batch in batches:
            if sum(p[2] for p in batch) + piece[2] <= limit:
                batch.append(piece)
                break
        else:
            batches.append([piece])
    for i, batch in enumerate(batches, 1):
        out = dest / f"batch-{i:02d}"
        out.mkdir(parents=True)
        for name, content, _ in batch:
            if isinstance(content, Path):
                shutil.copy2(content, out / name)
            else:
                (out / name).write_bytes(content)
        (out / MANIFEST).write_text(json.dumps({
            "batch": i, "batches": len(batches), "files": sorted(p[0] for p in batch),
            "wheels": digests}, indent=1))
        print(f"{out}: {len(batch)} file(s), {sum(p[2] for p in batch) / 2**20:.1f} MiB")


def gather(batch: Path, stage: Path) -> None:
    manifest = json.loads((batch / MANIFEST).read_text())
    stage.mkdir(parents=True, exist_ok=True)
    for name in manifest["files"]:
        shutil.copy2(batch / name, stage / name)
    shutil.copy2(batch / MANIFEST, stage / f"manifest-{manifest['batch']:02d}.json")
    print(f"batch {manifest['batch']} of {manifest['batches']} in {stage}")
    status(stage)


def manifests(stage: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(stage.glob("manifest-*.json"))]


def status(stage: Path) -> bool:
    """Print which batches the stage holds; True when all are there."""
    found = manifests(stage)
    if not found:
        print(f"no batch in {stage} yet")
        return False
    total = found[0]["batches"]
    have = sorted(m["batch"] for m in found)
    missing = sorted(set(range(1, total + 1)) - set(have))
    print(f"batches {have} of {total} in {stage}" +
          (f"; missing {missing}" if missing else "; complete"))
    return not missing


def join(stage: Path) -> list[Path]:
    """The whole wheels, parts joined, each checked against its SHA-256."""
    digests: dict[str, str] = {}
    for manifest in manifests(stage):
        digests.update(manifest["wheels"])
    out = []
    for name, digest in sorted(digests.items()):
        wheel = stage / name
        parts = sorted(stage.glob(f"{name}{PART}*"))
        if parts:
            with wheel.open("wb") as whole:
                for part in parts:
                    whole.write(part.read_bytes())
        if not wheel.exists():
            raise SystemExit(f"{name} is missing from {stage}")
        if sha256(wheel) != digest:
            raise SystemExit(f"{name} does not match its SHA-256: a part is missing or damaged")
        out.append(wheel)
    return out


def install(stage: Path, site: Path, extra_pip: list[str]) -> None:
    if not status(stage):
        raise SystemExit("gather every batch first")
    wheels = join(stage)
    site.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps",
                    "--no-compile", "--upgrade", "--disable-pip-version-check", "--quiet",
                    "--target", str(site), *extra_pip, *map(str, wheels)], check=True)
    print(f"installed {len(wheels)} wheel(s) into {site}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="download, cut and pack the batches (here)")
    b.add_argument("--dest", type=Path, default=ROOT / ".whl-dsl")
    b.add_argument("--batch-mb", type=int, default=60)
    g = sub.add_parser("gather", help="copy a carried batch to the stage (on the host)")
    g.add_argument("batch", type=Path)
    for p in (g, sub.add_parser("status", help="which batches the stage holds"),
              i := sub.add_parser("install", help="join, check and install (on the host)")):
        p.add_argument("--stage", type=Path, default=Path("/var/tmp/kes-dsl"))
    i.add_argument("--site", type=Path, default=Path("/opt/kes-dsl"))
    i.add_argument("--pip-arg", action="append", default=[],
                   help="one more pip argument (e.g. --python-version=3.12 off the host)")
    args = parser.parse_args(argv)
    if args.command == "build":
        build(args.dest, args.batch_mb)
    elif args.command == "gather":
        gather(args.batch, args.stage)
    elif args.command == "status":
        return 0 if status(args.stage) else 1
    else:
        install(args.stage, args.site, args.pip_arg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
