"""torch_cuda: KernelBench ``ModelNew`` sources that build CUDA extensions with ``load_inline``.

A first ``load_inline`` build costs about a minute of nvcc. While the source is imported and
its model built, ``torch.utils.cpp_extension.load_inline`` is replaced by a wrapper that
builds into the content-addressed cache of :mod:`compilation.build_cache`, under
``<cache_dir>/torch_ext/<key>/``, keyed by the sources, functions, flags, torch and Python
versions and the GPU arch. The extension is built under a name derived from the key, so a
second evaluation of the same source, in any worker, loads the finished library without
compiling. A failed build is reported with the compiler's ``error:`` lines, mapped back to
lines of the ``cpp_sources``/``cuda_sources`` strings, instead of the whole ninja log.

After that the kernel behaves as a torch kernel (:mod:`compilation.torch_backend`).
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import os
import platform
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from compilation.base import CompileContext, CompileError, load_module
from compilation.build_cache import cache_key, get_or_build
from compilation.torch_backend import TorchKernel, python_preset, resolve_entry
from shared.models import KernelCode

CPU_MODE_MESSAGE = "kernel_type 'torch_cuda' needs a CUDA GPU; this server runs in CPU mode"
MAX_ERRORS = 10
# Arguments of load_inline that do not change what is built.
_NOT_IN_KEY = frozenset({"name", "build_directory", "verbose", "keep_intermediates"})
# Lines torch puts before the user's sources (see load_inline), unless no_implicit_headers.
_IMPLICIT_LINES = {"main.cpp": 1, "cuda.cu": 3, "sycl.sycl": 2}
_SOURCE_ARGUMENT = {"main.cpp": "cpp_sources", "cuda.cu": "cuda_sources",
                    "sycl.sycl": "sycl_sources"}
_DIAGNOSTIC = re.compile(
    r"^(?P<file>\S+?)(?::(?P<gline>\d+):(?P<col>\d+):|\((?P<nline>\d+)\):) "
    r"(?P<what>(?:fatal |catastrophic )?error(?: #\S+)?:.*)$"
)
_GUTTER = re.compile(r"^\s*\d*\s*\| ?")
_OTHER_ERROR = re.compile(r"undefined reference to|undefined symbol|^collect2: error|"
                          r"^ptxas (?:fatal|error)|^nvcc fatal|^/usr/bin/ld: .*error")


@dataclass(frozen=True)
class ExtensionBuild:
    """One ``load_inline`` call of the source, as the cache served it."""

    name: str  # the name the source gave
    module_name: str  # the name it was built and loaded as
    key: str
    cached: bool  # True when a finished build was loaded without compiling
    seconds: float


class ExtensionBuildError(CompileError):
    """A ``load_inline`` build failed; the message holds the compiler's error lines."""


class TorchCudaKernel(TorchKernel):
    builds: list[ExtensionBuild]


class TorchCudaBackend:
    def compile(self, kernel: KernelCode, ctx: CompileContext) -> TorchCudaKernel:
        if ctx.device != "cuda":
            raise CompileError(CPU_MODE_MESSAGE)
        return load_with_build_cache(kernel, ctx)


def load_with_build_cache(kernel: KernelCode, ctx: CompileContext) -> TorchCudaKernel:
    """Import the source and build its model, with ``load_inline`` going through the cache."""
    loader = CachedLoadInline(ctx.cache_dir / "torch_ext")
    try:
        with loader.installed():
            module = load_module(kernel.source_code, ctx, python_preset())
            entry = resolve_entry(module, kernel, ctx)
    except CompileError as exc:
        cause = exc.__cause__
        if isinstance(cause, ExtensionBuildError):  # the build log says more than a traceback
            calls = [f.lineno for f in traceback.extract_tb(cause.__traceback__)
                     if Path(f.filename).parent == ctx.work_dir]
            where = f"\n(load_inline was called at line {calls[-1]})" if calls else ""
            raise ExtensionBuildError(f"{cause}{where}") from cause
        raise
    built = TorchCudaKernel(module, entry, kernel.io, ctx.device)
    built.builds = loader.builds
    return built


class CachedLoadInline:
    """A stand-in for ``load_inline`` that builds through the content-addressed cache."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.builds: list[ExtensionBuild] = []

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Replace ``torch.utils.cpp_extension.load_inline`` with the cached one meanwhile."""
        from torch.utils import cpp_extension

        original = cpp_extension.load_inline
        cpp_extension.load_inline = self.wrap(original)
        try:
            yield
        finally:
            cpp_extension.load_inline = original

    def wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(original)

        @functools.wraps(original)
        def load_inline(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return self.load(original, dict(bound.arguments))

        return load_inline

    def load(self, original: Callable[..., Any], arguments: dict[str, Any]) -> Any:
        """Build (or find) the extension ``arguments`` describe and return what load_inline would."""
        key = extension_key(arguments)
        module_name = f"{_identifier(str(arguments['name']))}_{key[:16]}"
        is_python_module = bool(arguments.get("is_python_module", True))
        started = time.perf_counter()
        fresh: list[Any] = []

        def build(directory: Path) -> dict[str, Any]:
            call = {k: list(v) if isinstance(v, list) else v for k, v in arguments.items()}
            call.update(name=module_name, build_directory=str(directory), verbose=False)
            try:
                fresh.append(original(**call))
            except Exception as exc:  # torch raises RuntimeError, OSError, ...
                raise ExtensionBuildError(build_error_message(
                    str(exc), str(arguments["name"]), bool(arguments.get("no_implicit_headers")),
                )) from exc
            # torch appends _v1, _v2... to a name it already built in this process elsewhere
            built_as = fresh[0].__name__ if is_python_module else Path(fresh[0]).stem
            return {"module_name": built_as, "library": f"{built_as}.so"}

        result = get_or_build(self.root, key, build)
        module_name = result.info["module_name"]
        if fresh:
            loaded = fresh[0]
            if is_python_module:
                sys.modules[module_name] = loaded
        else:
            loaded = _import_library(result.path / result.info["library"], module_name,
                                     is_python_module)
        self.builds.append(ExtensionBuild(str(arguments["name"]), module_name, key,
                                          cached=not result.built,
                                          seconds=time.perf_counter() - started))
        return loaded


def extension_key(arguments: dict[str, Any]) -> str:
    """The cache key of one ``load_inline`` call: what it builds, and with which toolchain."""
    parts = {k: [v] if isinstance(v, str) and k.endswith("sources") else v
             for k, v in arguments.items() if k not in _NOT_IN_KEY}
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        device_arch = f"{major}.{minor}"
    else:
        device_arch = "none"
    toolchain = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "arch": os.environ.get("TORCH_CUDA_ARCH_LIST") or device_arch,
        "python": sys.implementation.cache_tag,
        "machine": platform.machine(),
    }
    return cache_key("torch_ext", parts, toolchain)


def _identifier(name: str) -> str:
    ident = re.sub(r"\W", "_", name) or "ext"
    return f"ext_{ident}" if ident[0].isdigit() else ident


def _import_library(path: Path, module_name: str, is_python_module: bool) -> Any:
    if not is_python_module:
        torch.ops.load_library(str(path))
        return str(path)
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise CompileError(f"cannot load the built extension {path.name}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        raise CompileError(f"the extension {module_name} built but does not load: {exc}") from exc
    sys.modules[module_name] = module
    return module


def build_error_message(log: str, name: str, no_implicit_headers: bool = False) -> str:
    """The compiler's error lines from a failed build's log, located in the user's sources.

    ``main.cpp:5:3: error: ...`` (g++) and ``cuda.cu(12): error: ...`` (nvcc) become
    ``cpp_sources line 4, column 3: error: ...`` and ``cuda_sources line 9: error: ...``,
    each followed by the source line and caret the compiler printed.
    """
    lines = log.splitlines()
    shown: list[str] = []
    count = 0
    for i, line in enumerate(lines):
        match = _DIAGNOSTIC.match(line.strip())
        if match is None and not _OTHER_ERROR.search(line):
            continue
        count += 1
        if count > MAX_ERRORS:
            continue
        shown.append(_located(match, no_implicit_headers) if match else line.strip())
        for follow in lines[i + 1:i + 3]:  # the compiler's echo of the line, and the caret
            if follow.startswith(" ") and follow.strip() and not _DIAGNOSTIC.match(follow.strip()):
                # g++ prefixes its echo with the generated file's line number: drop it
                shown.append("    " + _GUTTER.sub("", follow.rstrip()).strip("\n"))
            else:
                break
    if not shown:
        shown = [line.rstrip() for line in lines[-25:]]
    elif count > MAX_ERRORS:
        shown.append(f"({count - MAX_ERRORS} more errors not shown)")
    return f"building the load_inline extension '{name}' failed:\n" + "\n".join(shown)


def _located(match: re.Match[str], no_implicit_headers: bool) -> str:
    file = Path(match["file"]).name
    line = int(match["gline"] or match["nline"])
    if file not in _SOURCE_ARGUMENT:  # e.g. a torch header: keep the compiler's own words
        return match.group(0)
    line -= 0 if no_implicit_headers else _IMPLICIT_LINES[file]
    where = f"{_SOURCE_ARGUMENT[file]} line {line}"
    if line < 1:
        where = f"{_SOURCE_ARGUMENT[file]} (in the headers load_inline adds)"
    if match["col"]:
        where += f", column {match['col']}"
    return f"{where}: {match['what']}"
