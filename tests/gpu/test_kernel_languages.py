"""Each kernel language the GPU server runs (CuTe DSL, TileLang, Helion, cuTile): its example
(client/examples/dsl_kernels/) is correct against the torch reference, its wrong twin is
incorrect, and a second comparison of the same source compiles nothing (its JIT caches come
back from the server's store). A language the server does not run is skipped with /health's
reason. (Escapes from a language's process: tests/adversarial/test_escapes_in_kernel_languages.py.)"""

from __future__ import annotations

import sys
import uuid
from types import ModuleType

import httpx
import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "client" / "examples"))
from dsl_kernels import cute_dsl_add, cutile_add, helion_add, tilelang_add

pytestmark = [pytest.mark.gpu, pytest.mark.e2e]

EXAMPLES: dict[str, ModuleType] = {"cute_dsl": cute_dsl_add, "tilelang": tilelang_add,
                                   "helion": helion_add, "cutile": cutile_add}
N = 1 << 20
REF = "class Model(torch.nn.Module):\n    def forward(self, a, b):\n        return a + b\n"
IO = {"args": [
    {"name": name, "type": "tensor", "role": "input",
     "tensor_spec": {"shape": [N], "dtype": "float32", "init": {"kind": "randn", "seed": seed}}}
    for name, seed in (("a", 1), ("b", 2))]}


def kernel(source: str) -> dict:
    return {"source_code": source, "kernel_type": "torch", "io": IO}


def language(client: httpx.Client, name: str) -> dict:
    listed = {item["name"]: item for item in client.get("/health").json()["languages"]}
    item = listed[name]
    if not item["available"]:
        pytest.skip(f"{name} does not run on this server: {item['reason']}")
    return item


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_a_languages_example_is_correct_and_its_wrong_twin_is_not(
        client: httpx.Client, name: str) -> None:
    language(client, name)
    example = EXAMPLES[name]
    body = {"ref_kernel": kernel(REF), "num_trials": 30, "num_correct_trials": 3}
    right = client.post("/compare", json={**body, "custom_kernel": kernel(example.CORRECT)},
                        timeout=600).json()
    result = right["kernel_exec_result"]
    assert result["outcome"] == "success" and result["correctness"] is True, result
    # (whether the judge flags a ~10 us kernel is the judge's own residual, which the
    # adversarial honest set asserts; the verdict is this test's)
    print(name, "runtime ms", result["runtime"], "suspicious", result["integrity"]["suspicious"],
          "JIT caches:", result["metadata"].get("jit_cache"))
    wrong = client.post("/compare", json={**body, "custom_kernel": kernel(example.WRONG)},
                        timeout=600).json()
    assert wrong["kernel_exec_result"]["outcome"] == "incorrect", wrong


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_a_languages_second_job_of_a_source_compiles_nothing(
        client: httpx.Client, name: str) -> None:
    language(client, name)
    example = EXAMPLES[name]
    # CuTe DSL caches only what a @cute.jit call compiles, not cute.compile (cute_dsl_add.py)
    source = getattr(example, "CACHED", example.CORRECT) + f"\n# {uuid.uuid4().hex}\n"
    caches = []
    for _ in range(2):
        r = client.post("/evaluate", json={"kernel": kernel(source), "num_trials": 5},
                        timeout=600).json()
        result = r["kernel_exec_result"]
        assert result["outcome"] == "success", result
        caches.append(result["metadata"]["jit_cache"])
        print(name, "JIT caches:", caches[-1], "worker calls:",
              result["metadata"].get("worker_calls"))
    # the first compiled into the caches; the second got them back and compiled nothing
    assert caches[0]["new_files"] > 0 and not caches[0]["restored"], caches
    assert caches[1]["restored"] and caches[1]["new_files"] == 0, caches
