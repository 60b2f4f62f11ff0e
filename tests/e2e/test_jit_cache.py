"""A source's JIT caches are kept for its next job and for no other source (under CACHE_DIR).

The kernels stand in for a JIT compiler: at import, each looks for its "compiled" file under
the cache directory Triton's compiler would use, and writes it when it is missing (a
compile). The second job of the same source must find it (it compiles nothing); another
source must never see it."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import httpx
import pytest

from tests.conftest import Server

pytestmark = pytest.mark.e2e

COMPILING = """
import os
import pathlib

CACHE = pathlib.Path(os.environ["TRITON_CACHE_DIR"]) / "@TAG@" / "kernel.cubin"
FOUND = CACHE.exists()
if not FOUND:  # "compile"
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    CACHE.write_bytes(b"compiled code " * 64)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x * 2
"""
# another source: any cache it finds under the first one's name was handed to the wrong source
SNOOPING = """
import os
import pathlib

ROOT = pathlib.Path(os.environ["TRITON_CACHE_DIR"])
SEEN = sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*")) if ROOT.exists() else []


class ModelNew(torch.nn.Module):
    def forward(self, x):
        if SEEN:
            raise RuntimeError(f"another source's cache is here: {SEEN}")
        return x * 2
"""
REFERENCE = """
class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2
"""
X_IO = {"args": [{"name": "x", "type": "tensor", "role": "input",
                  "tensor_spec": {"shape": [1024], "dtype": "float32",
                                  "init": {"kind": "randn", "seed": 1}}}]}


def kernel(source: str) -> dict:
    return {"source_code": source, "kernel_type": "torch", "io": X_IO}


def evaluate(client: httpx.Client, source: str) -> dict:
    r = client.post("/evaluate", json={"kernel": kernel(source), "num_trials": 1})
    assert r.status_code == 200, r.text
    result = r.json()["kernel_exec_result"]
    assert result["outcome"] == "success", result
    return result


def test_a_sources_second_evaluation_finds_what_its_first_compiled(
        client: httpx.Client) -> None:
    source = COMPILING.replace("@TAG@", uuid.uuid4().hex)
    first = evaluate(client, source)["metadata"]["jit_cache"]
    assert first["restored"] is False and first["new_files"] == 1 and first["kept_bytes"] > 0
    second = evaluate(client, source)["metadata"]["jit_cache"]
    assert first["new_file_names"] == [first_name(source)]
    assert second == {"restored": True, "files": 1, "new_files": 0, "new_file_names": [],
                      "kept_bytes": 0}
    counts = client.get("/stats").json()["cache"]["jit"]
    assert counts["kept"] >= 1 and counts["restored"] >= 1, counts


def first_name(source: str) -> str:
    tag = source.split('/ "', 1)[1].split('"', 1)[0]
    return f"triton/{tag}/kernel.cubin"


def test_another_source_never_sees_a_sources_cache(client: httpx.Client) -> None:
    evaluate(client, COMPILING.replace("@TAG@", uuid.uuid4().hex))
    snooper = evaluate(client, SNOOPING)["metadata"]["jit_cache"]
    assert snooper["files"] == 0 and snooper["restored"] is False
    assert snooper["kept_bytes"] == 0  # nothing compiled: nothing kept


def test_a_compared_candidate_compiles_once_across_comparisons(client: httpx.Client) -> None:
    source = COMPILING.replace("@TAG@", uuid.uuid4().hex)
    body = {"ref_kernel": kernel(REFERENCE), "custom_kernel": kernel(source), "num_trials": 3}
    caches = []
    for _ in range(2):
        r = client.post("/compare", json=body)
        assert r.status_code == 200, r.text
        result = r.json()["kernel_exec_result"]
        assert result["outcome"] == "success" and result["correctness"] is True, result
        caches.append(result["metadata"]["jit_cache"])
    assert caches[0]["restored"] is False and caches[0]["new_files"] == 1
    assert caches[1]["restored"] is True and caches[1]["new_files"] == 0


# Triton's cache groups (and CuTe DSL's module hash) record absolute paths: a cache made in one
# worker must be found at the same paths in the next one, the source's own file included
RECORDING = """
import json
import os
import pathlib

GROUP = pathlib.Path(os.environ["TRITON_CACHE_DIR"]) / "@TAG@" / "group.json"
if GROUP.exists():
    RECORDED = json.loads(GROUP.read_text())
    for path in (RECORDED["binary"], RECORDED["source"]):
        if not os.path.exists(path):
            raise RuntimeError(f"a path the cache recorded is gone in this worker: {path}")
    if RECORDED["source"] != __file__:
        raise RuntimeError(f"the source moved: {RECORDED['source']} -> {__file__}")
else:
    GROUP.parent.mkdir(parents=True)
    (GROUP.parent / "kernel.cubin").write_bytes(b"compiled")
    GROUP.write_text(json.dumps({"binary": str(GROUP.parent / "kernel.cubin"),
                                 "source": __file__}))


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x * 2
"""


def test_paths_a_restored_cache_recorded_still_hold_in_the_next_worker(
        client: httpx.Client) -> None:
    if client.get("/health").json().get("isolation") in (None, "none"):
        pytest.skip("without isolation a worker has no /tmp of its own to fix the paths in")
    source = RECORDING.replace("@TAG@", uuid.uuid4().hex)
    assert evaluate(client, source)["metadata"]["jit_cache"]["new_files"] == 2
    again = evaluate(client, source)["metadata"]["jit_cache"]
    assert again["restored"] and again["new_files"] == 0


FLOODING = """
import os
import pathlib

ROOT = pathlib.Path(os.environ["TRITON_CACHE_DIR"]) / "@TAG@"
ROOT.mkdir(parents=True, exist_ok=True)
(ROOT / "huge.bin").write_bytes(os.urandom(200_000))


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x * 2
"""


def test_caches_over_an_entrys_share_of_the_store_are_not_kept_and_the_job_stands(
        server_factory: Callable[..., Server]) -> None:
    server = server_factory(JIT_CACHE_BYTES="100000")  # an entry may hold 25,000 bytes
    with httpx.Client(base_url=server.url, timeout=300) as c:
        tag = uuid.uuid4().hex
        source = FLOODING.replace("@TAG@", tag)
        for _ in range(2):  # never kept, so never restored
            caches = evaluate(c, source)["metadata"]["jit_cache"]
            assert caches["restored"] is False and caches["kept_bytes"] == 0, caches
            assert caches["new_file_names"] == [f"triton/{tag}/huge.bin"]
        assert c.get("/stats").json()["cache"]["jit"]["kept"] == 0
