"""torch_cuda: load_inline through the build cache, build errors, CPU mode, and a GPU build."""

from __future__ import annotations

import ctypes
import inspect
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from compilation.base import CompileContext, CompileError, load_module
from compilation.torch_cuda_backend import (
    CPU_MODE_MESSAGE,
    CachedLoadInline,
    ExtensionBuildError,
    TorchCudaBackend,
    build_error_message,
    extension_key,
    load_with_build_cache,
)
from shared.models import KernelCode, KernelType

HAS_CUDA = torch.cuda.is_available()
REPO = Path(__file__).resolve().parents[2]
HAS_TOOLCHAIN = all(
    subprocess.run(["which", tool], capture_output=True, check=False).returncode == 0
    for tool in ("ninja", "c++")
)
needs_toolchain = pytest.mark.skipif(not HAS_TOOLCHAIN, reason="needs ninja and a C++ compiler")

# A C-only extension: builds in well under a second, without torch's headers.
TRIVIAL = {
    "name": "trivial",
    "cpp_sources": 'extern "C" int answer() { return 42; }',
    "no_implicit_headers": True,
    "is_python_module": False,
}

# What a failed build's exception says (torch's ninja log), abridged from real runs.
GXX_LOG = """Error building extension 'x': [1/2] c++ -MMD -MF main.o.d -DTORCH_EXTENSION_NAME=x \
-isystem /venv/torch/include -fPIC -std=c++20 -c /cache/ab12/build/main.cpp -o main.o
FAILED: main.o
c++ -MMD -MF main.o.d -DTORCH_EXTENSION_NAME=x -fPIC -std=c++20 -Wno-error=deprecated -c \
/cache/ab12/build/main.cpp -o main.o
/cache/ab12/build/main.cpp: In function 'int answer()':
/cache/ab12/build/main.cpp:2:25: error: expected ';' before '}' token
    2 | int answer() { return 42 }
      |                         ^~
      |                         ;
ninja: build stopped: subcommand failed.
"""
NVCC_LOG = """Error building extension 'elementwise_add': [1/3] /usr/local/cuda/bin/nvcc \
--generate-dependencies-with-compile -c /cache/cd34/build/cuda.cu -o cuda.cuda.o
FAILED: cuda.cuda.o
/usr/local/cuda/bin/nvcc -DTORCH_EXTENSION_NAME=elementwise_add -c /cache/cd34/build/cuda.cu
/cache/cd34/build/cuda.cu(9): error: identifier "sizee" is undefined
          out[idx] = a[idx] + b[idx] + sizee;
                                       ^

/cache/cd34/build/cuda.cu(14): error: expected a ";"
      auto out = torch::zeros_like(a)
                                     ^

2 errors detected in the compilation of "/cache/cd34/build/cuda.cu".
[2/3] c++ -MMD -MF main.o.d -c /cache/cd34/build/main.cpp -o main.o
ninja: build stopped: subcommand failed.
"""


def line_of(source: str, marker: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if marker in line)


def spy(calls: list[dict[str, Any]]) -> Callable[..., Any]:
    """The real load_inline, counting its calls."""
    from torch.utils.cpp_extension import load_inline

    def original(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return load_inline(*args, **kwargs)

    original.__signature__ = inspect.signature(load_inline)  # type: ignore[attr-defined]
    return original


def test_cpu_mode_is_refused(cpu_ctx: CompileContext) -> None:
    kernel = KernelCode(source_code="class ModelNew: pass", kernel_type=KernelType.TORCH_CUDA)
    with pytest.raises(CompileError) as info:
        TorchCudaBackend().compile(kernel, cpu_ctx)
    assert str(info.value) == CPU_MODE_MESSAGE


def test_key_depends_on_what_is_built_not_on_the_name() -> None:
    base = {"name": "a", "cpp_sources": "int f();", "extra_cflags": ["-O3"], "verbose": False}
    key = extension_key(base)
    assert key == extension_key({**base, "name": "b", "verbose": True})
    assert key == extension_key({**base, "cpp_sources": ["int f();"]})  # str == [str]
    assert key != extension_key({**base, "cpp_sources": "int g();"})
    assert key != extension_key({**base, "extra_cflags": ["-O2"]})


@needs_toolchain
def test_second_load_comes_from_the_cache_without_compiling(tmp_path: Path) -> None:
    calls: list[dict[str, Any]] = []
    first = CachedLoadInline(tmp_path)
    library = first.wrap(spy(calls))(**TRIVIAL)
    assert ctypes.CDLL(library).answer() == 42
    assert len(calls) == 1 and calls[0]["name"].startswith("trivial_")
    [build] = first.builds
    assert not build.cached
    assert (tmp_path / build.key / "complete.json").exists()

    second = CachedLoadInline(tmp_path)  # as a later job would
    again = second.wrap(spy(calls))(**TRIVIAL)
    assert len(calls) == 1  # no second build
    assert second.builds[0].cached and second.builds[0].module_name == build.module_name
    assert again == library and ctypes.CDLL(again).answer() == 42


@needs_toolchain
def test_user_code_importing_load_inline_goes_through_the_cache(
    tmp_path: Path, cpu_ctx: CompileContext
) -> None:
    source = (
        "from torch.utils.cpp_extension import load_inline\n"
        f"lib = load_inline(**{TRIVIAL!r})\n"
    )
    from torch.utils import cpp_extension

    original = cpp_extension.load_inline
    loader = CachedLoadInline(tmp_path / "ext")
    with loader.installed():
        assert cpp_extension.load_inline is not original
        module = load_module(source, cpu_ctx)
    assert cpp_extension.load_inline is original
    [build] = loader.builds
    assert Path(module.lib).parent == tmp_path / "ext" / build.key / "build"


@needs_toolchain
def test_build_error_shows_the_compiler_error_lines(tmp_path: Path) -> None:
    broken = {**TRIVIAL, "cpp_sources": 'extern "C" int answer() {\n  return 42\n}\n'}
    loader = CachedLoadInline(tmp_path)
    with pytest.raises(ExtensionBuildError) as info:
        loader.wrap(spy([]))(**broken)
    message = str(info.value)
    assert message.startswith("building the load_inline extension 'trivial' failed:\n")
    # gcc quotes with the locale's quotation marks
    assert re.search(r"cpp_sources line 2, column 12: error: expected .;. before", message)
    assert "ninja" not in message and "-fPIC" not in message
    assert not any(p.name == "complete.json" for p in tmp_path.rglob("*"))


MODEL_WITH_C_EXTENSION = f"""
import ctypes
import torch
from torch.utils.cpp_extension import load_inline

lib = ctypes.CDLL(load_inline(**{TRIVIAL!r}))


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x * lib.answer()
"""


@needs_toolchain
def test_the_backend_flow_builds_once_and_then_loads(tmp_path: Path) -> None:
    """Everything the GPU backend does after its GPU check, with a C-only extension."""
    kernel = KernelCode(source_code=MODEL_WITH_C_EXTENSION, kernel_type=KernelType.TORCH_CUDA)
    first = load_with_build_cache(kernel, CompileContext("cpu", tmp_path / "a", tmp_path / "c"))
    second = load_with_build_cache(kernel, CompileContext("cpu", tmp_path / "b", tmp_path / "c"))
    assert [b.cached for b in first.builds + second.builds] == [False, True]
    args = second.make_inputs(0)
    torch.testing.assert_close(second.run(args)[0], args.values[0] * 42)


@needs_toolchain
def test_the_backend_flow_reports_a_failed_build_and_where_it_was_asked_for(
    tmp_path: Path, cpu_ctx: CompileContext
) -> None:
    source = MODEL_WITH_C_EXTENSION.replace("return 42;", "return 42")
    kernel = KernelCode(source_code=source, kernel_type=KernelType.TORCH_CUDA)
    with pytest.raises(ExtensionBuildError) as info:
        load_with_build_cache(kernel, cpu_ctx)
    message = str(info.value)
    assert message.startswith("building the load_inline extension 'trivial' failed:")
    assert "cpp_sources line 1, column" in message and "Traceback" not in message
    assert message.endswith(f"(load_inline was called at line {line_of(source, 'CDLL')})")


def test_error_lines_of_gxx_are_mapped_past_the_implicit_header() -> None:
    message = build_error_message(GXX_LOG, "x")
    assert message.splitlines() == [
        "building the load_inline extension 'x' failed:",
        "cpp_sources line 1, column 25: error: expected ';' before '}' token",
        "    int answer() { return 42 }",
        "                            ^~",
    ]


def test_error_lines_of_nvcc_are_mapped_past_the_implicit_headers() -> None:
    lines = build_error_message(NVCC_LOG, "elementwise_add").splitlines()
    assert lines[1] == 'cuda_sources line 6: error: identifier "sizee" is undefined'
    assert lines[2].strip() == "out[idx] = a[idx] + b[idx] + sizee;"
    assert lines[4] == 'cuda_sources line 11: error: expected a ";"'
    assert len(lines) == 7  # two errors, each with its source line and caret; nothing else


def test_unrecognised_logs_keep_their_tail() -> None:
    message = build_error_message("something odd\nlinker exploded", "x")
    assert message.endswith("something odd\nlinker exploded")


# ---- on a GPU -------------------------------------------------------------------------------

ELEMENTWISE_ADD = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void elementwise_add_kernel(const float* a, const float* b, float* out, int size) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        out[idx] = a[idx] + b[idx];
    }
}

torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b) {
    auto size = a.numel();
    auto out = torch::zeros_like(a);
    const int block_size = 256;
    const int num_blocks = (size + block_size - 1) / block_size;
    elementwise_add_kernel<<<num_blocks, block_size>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), size);
    return out;
}
"""

elementwise_add = load_inline(
    name="elementwise_add",
    cpp_sources="torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b);",
    cuda_sources=source,
    functions=["elementwise_add_cuda"],
    verbose=True,
    extra_cflags=[""],
    extra_ldflags=[""],
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.elementwise_add = elementwise_add

    def forward(self, a, b):
        return self.elementwise_add.elementwise_add_cuda(a, b)
'''

SECOND_LOAD = """
import json, sys, time
from pathlib import Path
from compilation.base import CompileContext
from compilation.torch_cuda_backend import TorchCudaBackend
from shared.models import KernelCode
kernel = KernelCode.model_validate_json(Path(sys.argv[1]).read_text())
ctx = CompileContext("cuda", Path(sys.argv[2]), Path(sys.argv[3]))
started = time.perf_counter()
built = TorchCudaBackend().compile(kernel, ctx)
seconds = time.perf_counter() - started
args = built.make_inputs(0)
ok = bool((built.run(args)[0] == args.values[0] + args.values[1]).all())
print(json.dumps({"seconds": seconds, "cached": [b.cached for b in built.builds], "ok": ok}))
"""


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_build_once_then_load_from_the_cache_in_a_new_process(tmp_path: Path) -> None:
    kernel = KernelCode(source_code=ELEMENTWISE_ADD, kernel_type=KernelType.TORCH_CUDA)
    ctx = CompileContext("cuda", tmp_path / "job1", tmp_path / "cache")
    started = time.perf_counter()
    built = TorchCudaBackend().compile(kernel, ctx)
    first = time.perf_counter() - started
    assert [b.cached for b in built.builds] == [False]
    args = built.make_inputs(0)
    torch.testing.assert_close(built.run(args)[0], args.values[0] + args.values[1])

    (tmp_path / "kernel.json").write_text(kernel.model_dump_json())
    done = subprocess.run(
        [sys.executable, "-c", SECOND_LOAD, str(tmp_path / "kernel.json"), str(tmp_path / "job2"),
         str(tmp_path / "cache")],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    second = json.loads(done.stdout.splitlines()[-1])
    print(f"\ntorch_cuda load_inline: first build {first:.2f} s, "
          f"cached load in a new process {second['seconds']:.3f} s")
    assert second["cached"] == [True] and second["ok"]
    assert second["seconds"] < first / 5


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_cuda_build_error_names_the_line_of_cuda_sources(ctx: CompileContext) -> None:
    broken = ELEMENTWISE_ADD.replace("out[idx] = a[idx] + b[idx];", "out[idx] = a[idx] + bb;")
    kernel = KernelCode(source_code=broken, kernel_type=KernelType.TORCH_CUDA)
    with pytest.raises(CompileError) as info:
        TorchCudaBackend().compile(kernel, ctx)
    message = str(info.value)
    cuda_source_lines = broken.split('source = """')[1].splitlines()
    line = next(i for i, text in enumerate(cuda_source_lines, 1) if "+ bb;" in text)
    assert f'cuda_sources line {line}: error: identifier "bb" is undefined' in message
    assert len(message) < 2000
