"""Reference reuse: a /compare's reference side, stored for the next identical comparison.

Search loops compare thousands of candidates against one reference. The reference's inputs
and outputs for every trial, and its raw timing samples, are the same each time when the
reference source, its IO contract, the trial settings and the GPU type are (the key,
:func:`reference_key`). They are written by the server (never by a worker) under
``REF_CACHE_DIR``, within ``REF_CACHE_BYTES`` (oldest entries go first; a reference larger
than a quarter of the budget is not stored). A reused trial still has its custom outputs
checked by a fresh reference process, which receives the stored outputs as a sealed copy:
the trust boundary is the same as for a reference that ran.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compilation.build_cache import cache_key
from shared.memfd import seal
from shared.models import WorkerJob

# A reference whose trials and timing inputs exceed this is run afresh each time: storing and
# reloading gigabytes costs more than the reference itself.
MAX_ENTRY_BYTES = 512 * 2**20
VERSION = 4  # bump whenever what an entry holds changes (3: timing figures in ref_raw)


def reference_key(job: WorkerJob, gpu_type: str) -> str:
    assert job.ref_kernel is not None
    return cache_key("reference", VERSION, job.ref_kernel.model_dump(mode="json"),
                     job.num_trials, job.num_correct_trials, job.device, gpu_type)


@dataclass
class StoredTrial:
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    mutates: bool
    input_bytes: int
    output_bytes: int
    input_prints: list[list[int]]
    inputs_path: Path
    outputs_path: Path


@dataclass
class StoredReference:
    ref_raw: dict[str, Any]
    trials: dict[int, StoredTrial] = field(default_factory=dict)
    timing_sets: tuple[dict[str, Any], Path] | None = None  # (meta, file) for the custom timing


class ReferenceCache:
    def __init__(self, root: Path, budget_bytes: int) -> None:
        self.root = Path(root)
        self.budget = budget_bytes
        self.hits = 0
        self.lookups = 0

    def get(self, key: str) -> StoredReference | None:
        self.lookups += 1
        entry = self.root / key
        try:
            info = json.loads((entry / "entry.json").read_text())
        except (OSError, ValueError):
            return None
        stored = StoredReference(ref_raw=info["ref_raw"])
        for t in info["trials"]:
            stored.trials[int(t["trial"])] = StoredTrial(
                inputs=t["inputs"], outputs=t["outputs"], mutates=bool(t["mutates"]),
                input_bytes=int(t["input_bytes"]), output_bytes=int(t["output_bytes"]),
                input_prints=t.get("input_prints", []), inputs_path=entry / f"in_{t['trial']}.bin", outputs_path=entry / f"out_{t['trial']}.bin",
            )
        if info.get("timing_sets") is not None:
            stored.timing_sets = (info["timing_sets"], entry / "timing_sets.bin")
        os.utime(entry)
        self.hits += 1
        return stored

    def recorder(self, key: str) -> Recorder | None:
        if self.budget <= 0:
            return None
        return Recorder(self, key)

    def sealed_copy(self, path: Path) -> int:
        """A sealed memory file holding ``path``'s bytes (workers never see the cache itself)."""
        fd = os.memfd_create("kes-ref", os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
        with open(path, "rb") as src:
            os.ftruncate(fd, max(os.fstat(src.fileno()).st_size, 1))
            with os.fdopen(os.dup(fd), "r+b") as dst:
                shutil.copyfileobj(src, dst, 16 << 20)
        seal(fd)
        return fd

    def evict(self) -> None:
        entries = [p for p in self.root.glob("*") if (p / "entry.json").exists()]
        sizes = {p: sum(f.stat().st_size for f in p.iterdir()) for p in entries}
        total = sum(sizes.values())
        for p in sorted(entries, key=lambda e: e.stat().st_mtime):
            if total <= self.budget:
                break
            shutil.rmtree(p, ignore_errors=True)
            total -= sizes[p]


class Recorder:
    """Collects one reference run's trials; stores them when the run completes."""

    def __init__(self, cache: ReferenceCache, key: str) -> None:
        self.cache = cache
        self.key = key
        self.staging = cache.root / f".staging-{key}-{os.getpid()}-{time.monotonic_ns()}"
        self.trials: list[dict[str, Any]] = []
        self.bytes = 0
        self.abandoned = False
        self.blobs: dict[str, dict[str, Any]] = {}

    def room(self) -> int:
        """Bytes this entry may still take (0 once abandoned)."""
        if self.abandoned:
            return 0
        return max(0, min(self.cache.budget // 4, MAX_ENTRY_BYTES) - self.bytes)

    def add_trial(self, trial: int, reply: dict[str, Any], fd_in: int, fd_out: int) -> None:
        if self.abandoned:
            return
        size = os.fstat(fd_in).st_size + os.fstat(fd_out).st_size
        self.bytes += size
        if self.bytes > min(self.cache.budget // 4, MAX_ENTRY_BYTES):
            self.abandon()
            return
        self.staging.mkdir(parents=True, exist_ok=True)
        for fd, name in ((fd_in, f"in_{trial}.bin"), (fd_out, f"out_{trial}.bin")):
            with os.fdopen(os.dup(fd), "rb") as src, open(self.staging / name, "wb") as dst:
                src.seek(0)
                shutil.copyfileobj(src, dst, 16 << 20)
        self.trials.append({
            "trial": trial, "inputs": reply["inputs"], "outputs": reply["outputs"],
            "mutates": bool(reply.get("mutates")), "input_bytes": int(reply.get("input_bytes", 0)),
            "output_bytes": int(reply.get("output_bytes", 0)),
            "input_prints": reply.get("input_prints", []),
        })

    def add_blob(self, name: str, meta: dict[str, Any], fd: int) -> None:
        """Another sealed file of the run (the timing input sets), stored beside the trials."""
        if self.abandoned:
            return
        self.bytes += os.fstat(fd).st_size
        if self.bytes > min(self.cache.budget // 4, MAX_ENTRY_BYTES):
            self.abandon()
            return
        self.staging.mkdir(parents=True, exist_ok=True)
        with os.fdopen(os.dup(fd), "rb") as src, open(self.staging / f"{name}.bin", "wb") as dst:
            src.seek(0)
            shutil.copyfileobj(src, dst, 16 << 20)
        self.blobs[name] = meta

    def abandon(self) -> None:
        self.abandoned = True
        shutil.rmtree(self.staging, ignore_errors=True)

    def finish(self, ref_stats_raw: Any, meta: dict[str, Any]) -> None:
        if self.abandoned or not self.trials or not isinstance(ref_stats_raw, dict):
            self.abandon()
            return
        (self.staging / "entry.json").write_text(json.dumps(
            {"ref_raw": ref_stats_raw, "trials": self.trials, "meta": meta,
             "timing_sets": self.blobs.get("timing_sets")}))
        target = self.cache.root / self.key
        try:
            os.replace(self.staging, target)
        except OSError:  # another comparison stored the same reference first
            self.abandon()
            return
        self.cache.evict()
