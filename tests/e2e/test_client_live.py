"""The client examples and the kernel-eval command line against the real server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, Server, cuda_available

pytestmark = pytest.mark.e2e

EXAMPLES = ROOT / "client" / "examples"


def run(args: list[str], timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, check=False, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


@pytest.mark.parametrize("example", ["torch_evaluate.py", "triton_evaluate.py", "compare_torch.py"])
def test_example_runs_against_the_server(live_server: Server, example: str) -> None:
    done = run([sys.executable, str(EXAMPLES / example), live_server.url])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ms" in done.stdout  # each example prints a timing


def test_cuda_example_says_what_it_needs(live_server: Server) -> None:
    done = run([sys.executable, str(EXAMPLES / "cuda_evaluate.py"), live_server.url])
    if cuda_available():
        assert done.returncode == 0, done.stdout + done.stderr
    else:
        assert "CUDA GPU" in done.stdout + done.stderr


def test_kernel_languages_example_runs_each_language_here_and_names_the_others(
        live_server: Server) -> None:
    done = run([sys.executable, str(EXAMPLES / "kernel_languages.py"), live_server.url])
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for name in ("cute_dsl", "tilelang", "helion", "cutile"):
        mine = [line for line in lines if line.startswith((name + " ", name + ":"))]
        assert mine, done.stdout
        if not cuda_available():  # none runs in CPU mode: each says why
            assert mine == [f"{name}: not on this server ({mine[0].split('(', 1)[1]}"]
            assert "CPU mode" in mine[0] or "not installed" in mine[0]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "kernel_eval_client.cli", *args])


def test_cli_evaluate_prints_a_table_and_json(live_server: Server, tmp_path: Path) -> None:
    kernel = tmp_path / "k.py"
    kernel.write_text(
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 3\n"
        "def get_inputs():\n    return [torch.randn(256)]\n"
    )
    table = cli("evaluate", str(kernel), "--server", live_server.url, "--trials", "5")
    assert table.returncode == 0, table.stdout + table.stderr
    assert "median" in table.stdout and "compiled" in table.stdout.lower()
    raw = cli("evaluate", str(kernel), "--server", live_server.url, "--trials", "5", "--json")
    body = json.loads(raw.stdout)
    assert body["kernel_exec_result"]["runtime_stats"]["num_samples"] == 5


def test_cli_compare_and_failing_kernel_exit_codes(live_server: Server, tmp_path: Path) -> None:
    ref = tmp_path / "ref.py"
    ref.write_text("class Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
                   "def get_inputs():\n    return [torch.randn(64)]\n")
    good = tmp_path / "good.py"
    good.write_text("class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x + x\n")
    bad = tmp_path / "bad.py"
    bad.write_text("class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n")
    ok = cli("compare", str(ref), str(good), "--type", "torch", "--server", live_server.url, "--trials", "5")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    wrong = cli("compare", str(ref), str(bad), "--type", "torch", "--server", live_server.url, "--trials", "5")
    assert wrong.returncode == 1
    assert "differ" in wrong.stdout


def test_cli_health_and_unreachable_server() -> None:
    done = cli("health", "--server", "http://127.0.0.1:9")
    assert done.returncode == 3
