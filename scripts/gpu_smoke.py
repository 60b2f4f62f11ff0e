"""A quick look at a real server on this host: health, one evaluate, one compare, one cheat.

    python3 scripts/gpu_smoke.py [STATE_DIR]

Starts ``main.py`` on a free port (the tests' way), prints what came back in a few lines per
request, and stops the server. For a first check of a new host before the test suite.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import start_server

MATMUL_REF = """
class Model(torch.nn.Module):
    def forward(self, a, b):
        return a @ b

def get_inputs():
    return [torch.randn(2048, 2048), torch.randn(2048, 2048)]

def get_init_inputs():
    return []
"""

MATMUL_NEW = MATMUL_REF.replace("class Model(", "class ModelNew(")

SIDE_STREAM = """
_side = None

class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        global _side
        if _side is None:
            _side = torch.cuda.Stream()
        with torch.cuda.stream(_side):
            out = a @ b
        return out
"""


def show(name: str, r: httpx.Response, started: float) -> None:
    body = r.json()
    result = body.get("kernel_exec_result") or {}
    stats = result.get("runtime_stats") or {}
    print(f"--- {name}: HTTP {r.status_code} in {time.monotonic() - started:.2f} s")
    print(json.dumps({
        "status": body.get("status"), "error": (body.get("error") or "")[:300],
        "outcome": result.get("outcome"), "correctness": result.get("correctness"),
        "median_ms": stats.get("median"), "method": stats.get("method"),
        "speedup": (result.get("metadata") or {}).get("speedup"),
        "integrity": result.get("integrity"),
        "stage_timings": body.get("stage_timings"),
        "errors": [result.get(k) for k in ("compilation_error", "runtime_error", "validation_error")
                   if result.get(k)],
        "resources": (result.get("metadata") or {}).get("resources"),
    }, indent=1)[:3000])


def main() -> int:
    state = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    server = start_server(state, {"MAX_WORKERS": "1"})
    try:
        client = httpx.Client(base_url=server.url, timeout=600)
        print(json.dumps(client.get("/health").json(), indent=1))
        jobs = [
            ("evaluate matmul", "/evaluate", {"kernel": {"source_code": MATMUL_REF, "kernel_type": "torch"},
                                              "num_trials": 50}),
            ("compare matmul with itself", "/compare", {
                "ref_kernel": {"source_code": MATMUL_REF, "kernel_type": "torch"},
                "custom_kernel": {"source_code": MATMUL_NEW, "kernel_type": "torch"}, "num_trials": 50}),
            ("compare again (reference reused)", "/compare", {
                "ref_kernel": {"source_code": MATMUL_REF, "kernel_type": "torch"},
                "custom_kernel": {"source_code": MATMUL_NEW, "kernel_type": "torch"}, "num_trials": 50}),
            ("side-stream cheat", "/compare", {
                "ref_kernel": {"source_code": MATMUL_REF, "kernel_type": "torch"},
                "custom_kernel": {"source_code": SIDE_STREAM, "kernel_type": "torch"}, "num_trials": 50}),
        ]
        for name, route, body in jobs:
            started = time.monotonic()
            show(name, client.post(route, json=body), started)
        trivial = {"kernel": {"source_code": "class Model(torch.nn.Module):\n    def forward(self, x):\n"
                              "        return x * 2\n", "kernel_type": "torch"}, "num_trials": 1}
        walls = []
        for _ in range(10):
            started = time.monotonic()
            r = client.post("/evaluate", json=trivial)
            walls.append((time.monotonic() - started) * 1e3)
        print("trivial evaluate wall ms:", [round(w, 1) for w in walls])
        print("last stage timings:", r.json().get("stage_timings"))
        print(json.dumps(client.get("/stats").json(), indent=1))
    finally:
        server.stop()
        log = server.log()
        print("--- worker start-ups")
        print("\n".join(line for line in log.splitlines() if "worker ready" in line))
        print("--- server log (tail)")
        print(log[-3000:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
