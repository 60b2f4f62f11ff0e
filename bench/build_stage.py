"""The CPU build stage: one torch_cuda source evaluated twice, then 10 distinct sources at once.

    python bench/build_stage.py [--out bench/results/build_stage.json]

For each job it reports the build, queue-wait, compile and total stages. The first
evaluation builds with nvcc in the CPU build stage (no GPU slot held: the slot is taken after
``build``, so ``queue_wait`` after the build is the wait for the GPU); the second finds the
build in the cache (``/stats`` cache.build hits) and runs no nvcc. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.conftest import cuda_available, start_server

TEMPLATE = '''
from torch.utils.cpp_extension import load_inline

cuda_src = """
__global__ void scale_kernel(const float* x, float* y, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * s + @K@.0f;
}
torch::Tensor scale(torch::Tensor x, double s) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), (float)s, n);
    return y;
}
"""
ext = load_inline(name="scale_@K@", cpp_sources="torch::Tensor scale(torch::Tensor x, double s);",
                  cuda_sources=cuda_src, functions=["scale"], verbose=False)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.scale(x, 2.0)


def get_inputs():
    return [torch.randn(1 << 20)]


def get_init_inputs():
    return []
'''


def job(k: int) -> dict:
    return {"kernel": {"source_code": TEMPLATE.replace("@K@", str(k)), "kernel_type": "torch_cuda"},
            "num_trials": 20, "timeout": 600}


def row(r: httpx.Response, wall: float) -> dict:
    body = r.json()
    st = body.get("stage_timings", {})
    return {"outcome": (body.get("kernel_exec_result") or {}).get("outcome"), "wall_s": round(wall, 2),
            **{k: round(st.get(k, 0.0) / 1e3, 3) for k in ("build", "queue_wait", "compile", "total")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--distinct", type=int, default=10)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/build_stage.json")
    args = parser.parse_args()
    if not cuda_available():
        print("build_stage: needs a CUDA GPU; skipped")
        return
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp), {"MAX_WORKERS": "1", "BUILD_WORKERS": "4"})
        try:
            client = httpx.Client(base_url=server.url, timeout=900)
            results: dict[str, object] = {}
            for label in ("first", "second"):
                t0 = time.perf_counter()
                r = client.post("/evaluate", json=job(0))
                results[label] = row(r, time.perf_counter() - t0)
            t0 = time.perf_counter()
            with ThreadPoolExecutor(max_workers=args.distinct) as pool:
                started = time.perf_counter()
                answers = list(pool.map(
                    lambda k: (client.post("/evaluate", json=job(k)), time.perf_counter() - started),
                    range(1, args.distinct + 1)))
            results["distinct_at_once"] = {"wall_s": round(time.perf_counter() - t0, 2),
                                           "jobs": [row(r, w) for r, w in answers]}
            results["build_cache"] = client.get("/stats").json().get("cache", {}).get("build")
        finally:
            server.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
