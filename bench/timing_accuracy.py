"""Does the server's number agree with an independent timer? (GPU only.)

For a few kernels, the server's median (CUDA events, L2 flush) is compared with
``triton.testing.do_bench``'s median for the same operation on the same GPU, measured in the
same run before and after the server's measurement.

    python bench/timing_accuracy.py [--out bench/results/timing_accuracy.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import start_server

CASES = {
    "matmul_fp32_4096": ("return a @ b", [[4096, 4096], [4096, 4096]], "float32"),
    "matmul_bf16_8192": ("return a @ b", [[8192, 8192], [8192, 8192]], "bfloat16"),
    "relu_fp32_64M": ("return torch.relu(a)", [[1 << 26]], "float32"),
    "softmax_fp32_4096": ("return torch.softmax(a, dim=-1)", [[4096, 4096]], "float32"),
    "add_fp32_1M": ("return a + a", [[1 << 20]], "float32"),
}
NAMES = "abcd"


def kernel(body: str, shapes: list[list[int]], dtype: str) -> dict:
    params = ", ".join(NAMES[: len(shapes)])
    args = [
        {"name": NAMES[i], "type": "tensor", "role": "input",
         "tensor_spec": {"shape": s, "dtype": dtype, "init": {"kind": "randn", "seed": i}}}
        for i, s in enumerate(shapes)
    ]
    source = f"class Model(torch.nn.Module):\n    def forward(self, {params}):\n        {body}\n"
    return {"source_code": source, "kernel_type": "torch", "io": {"args": args}}


def do_bench_median(body: str, shapes: list[list[int]], dtype: str) -> float:
    import torch
    import triton.testing

    tensors = [torch.randn(s, device="cuda").to(getattr(torch, dtype)) for s in shapes]
    scope = dict(zip(NAMES, tensors), torch=torch)
    fn = eval(f"lambda: {body.removeprefix('return ')}", scope)  # our own fixed CASES only
    return triton.testing.do_bench(fn, warmup=100, rep=500, return_mode="median")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("bench/results/timing_accuracy.json"))
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp), {"MAX_WORKERS": "1"})
        try:
            with httpx.Client(base_url=server.url, timeout=600) as client:
                for name, (body, shapes, dtype) in CASES.items():
                    before = do_bench_median(body, shapes, dtype)
                    r = client.post("/evaluate", json={"kernel": kernel(body, shapes, dtype), "num_trials": 200})
                    stats = r.json()["kernel_exec_result"]["runtime_stats"]
                    after = do_bench_median(body, shapes, dtype)
                    ref = (before + after) / 2
                    results[name] = {
                        "server_median_ms": stats["median"], "server_mean_ms": stats["mean"],
                        "server_std_ms": stats["std"], "do_bench_median_ms": [before, after],
                        "ratio": stats["median"] / ref,
                    }
        finally:
            server.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"{'case':<20}{'server med':>12}{'do_bench':>12}{'ratio':>8}{'std/med':>9}")
    for name, row in results.items():
        ref = sum(row["do_bench_median_ms"]) / 2
        print(f"{name:<20}{row['server_median_ms']:>12.4f}{ref:>12.4f}{row['ratio']:>8.3f}"
              f"{row['server_std_ms'] / row['server_median_ms']:>9.3f}")


if __name__ == "__main__":
    main()
