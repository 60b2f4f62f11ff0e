"""Probe the kernel languages outside the server, on a GPU host: for each example of
client/examples/dsl_kernels/, run it in a fresh process twice against the same cache
directories (as two jobs of one source would see them) and report the import time, the first
call's time (compile included), whether the right kernel matches ``a + b`` and the wrong twin
does not, and which files each run added under the caches.

    python3 scripts/probe_dsl_languages.py [--out probe.json] [--only cute_dsl,tilelang]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LANGUAGES = ("cute_dsl", "tilelang", "helion", "cutile")
CACHES = ("XDG_CACHE_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUTE_DSL_CACHE_DIR",
          "TILELANG_CACHE_DIR", "HELION_CACHE_DIR", "CUPY_CACHE_DIR")

CHILD = r'''
import importlib.util, json, pathlib, sys, time, traceback
t0 = time.perf_counter()
out = {}
try:
    import torch
    sys.path.insert(0, sys.argv[2])
    example = __import__(f"dsl_kernels.{sys.argv[1]}_add", fromlist=["x"])
    a = torch.randn(1 << 20, device="cuda"); b = torch.randn(1 << 20, device="cuda")
    for twin in ("CORRECT", "WRONG"):
        # from a file, as the server loads a source (the DSLs read their kernels' source)
        path = pathlib.Path(sys.argv[3]) / f"kernel_{twin.lower()}.py"
        path.write_text(getattr(example, twin))
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        start = time.perf_counter()
        spec.loader.exec_module(mod)
        out[f"{twin}_import_s"] = round(time.perf_counter() - start, 3)
        model = mod.ModelNew()
        start = time.perf_counter()
        c = model(a, b); torch.cuda.synchronize()
        out[f"{twin}_first_call_s"] = round(time.perf_counter() - start, 3)
        start = time.perf_counter()
        c = model(a, b); torch.cuda.synchronize()
        out[f"{twin}_second_call_ms"] = round((time.perf_counter() - start) * 1e3, 3)
        out[f"{twin}_matches"] = bool(torch.allclose(c, a + b))
except BaseException:
    out["error"] = traceback.format_exc()[-3000:]
out["total_s"] = round(time.perf_counter() - t0, 3)
print("PROBE-JSON " + json.dumps(out))
'''


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def probe(name: str, caches: Path, timeout: float) -> list[dict]:
    env = dict(os.environ, HOME=str(caches / "home"),
               HELION_AUTOTUNE_EFFORT="none")
    for var in CACHES:
        env[var] = str(caches / var.lower())
    rounds = []
    caches.mkdir(parents=True, exist_ok=True)
    for run in (1, 2):
        # the kernels' files, in another directory each run (as each job's scratch is)
        sources = caches.with_name(f"{caches.name}-sources-{run}")
        sources.mkdir()
        before = files(caches)
        began = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, "-c", CHILD, name,
                                   str(ROOT / "client" / "examples"), str(sources)],
                                  env=env, capture_output=True, text=True, timeout=timeout,
                                  check=False)
            line = [x for x in proc.stdout.splitlines() if x.startswith("PROBE-JSON ")]
            result = json.loads(line[-1][11:]) if line else {
                "error": f"rc {proc.returncode}: {proc.stderr[-3000:]}"}
        except subprocess.TimeoutExpired:
            result = {"error": f"timed out after {timeout} s"}
        added = sorted(files(caches) - before)
        result.update(run=run, wall_s=round(time.perf_counter() - began, 2),
                      files_added=len(added), added_sample=added[:12])
        print(name, json.dumps(result)[:4000], flush=True)
        rounds.append(result)
    return rounds


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    parser.add_argument("--only", default=",".join(LANGUAGES))
    parser.add_argument("--timeout", type=float, default=240)
    args = parser.parse_args()
    report = {}
    with tempfile.TemporaryDirectory(prefix="dsl-probe-") as tmp:
        for name in args.only.split(","):
            report[name] = probe(name, Path(tmp) / name, args.timeout)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
