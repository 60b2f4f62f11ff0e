"""The trust boundary in the layout: what runs where, checked on the imports themselves.

- The server (``app``, ``main``, ``mcp_server``, ``orchestration``, ``mcp_tools``, ``profiling``,
  ``shared``) imports nothing that runs in a job process, and never torch, Triton or CuPy.
- The judge (``judge``) imports nothing that runs beside the kernel under test
  (``kernel_side``), and so never the code that loads it.
- Code beside the kernel (``kernel_side``) imports nothing of the judge's.
- No server module imports itself back through others (no cycle, lazy or type-only).
- The sandbox and the harness import neither side (the zygote imports the job runtime,
  ``subprocess_worker``, which dispatches to both, before it forks: on purpose, so that each
  fork starts with them imported and no user code anywhere yet).

Imports are read from the source (every ``import`` and ``from ... import`` at any depth, lazy
ones inside functions included), followed through the project's own modules.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVER = ("app", "main", "mcp_server", "orchestration", "mcp_tools", "profiling", "shared")
JOB_PROCESS = ("harness", "judge", "kernel_side", "worker_host", "compilation", "validation",
               "io_contract", "subprocess_worker")
HEAVY = ("torch", "triton", "cupy", "cupti", "numpy")
# Server modules that start a job process by its module name (python -m ...), never import it.
LAUNCHED = {"worker_host.zygote", "kernel_side.ncu_target"}


def module_path(name: str) -> Path | None:
    parts = name.split(".")
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def project_modules(package: str) -> list[str]:
    path = module_path(package)
    if path is None:
        return []
    if path.name != "__init__.py":
        return [package]
    out = []
    for file in sorted(path.parent.rglob("*.py")):
        rel = file.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append(".".join(parts))
    return out


@cache
def direct_imports(name: str) -> frozenset[str]:
    path = module_path(name)
    if path is None:
        return frozenset()
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return frozenset(found)


def reaches(start: str) -> dict[str, str]:
    """Every module ``start`` imports, directly or through the project's modules: name ->
    the project module that imports it."""
    seen: dict[str, str] = {}
    stack = [start]
    visited: set[str] = set()
    while stack:
        current = stack.pop()
        if current in visited:
            continue
        visited.add(current)
        for imported in direct_imports(current):
            seen.setdefault(imported, current)
            if module_path(imported) is not None:
                stack.append(imported)
    return seen


def offending(start: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(f"{start} -> ... {via} imports {name}" for name, via in reaches(start).items()
                  if name.split(".")[0] in forbidden or name in forbidden)


def modules_of(packages: tuple[str, ...]) -> list[str]:
    return [m for p in packages for m in project_modules(p)]


@pytest.mark.parametrize("module", modules_of(SERVER))
def test_the_server_imports_nothing_that_runs_in_a_job_process(module: str) -> None:
    assert offending(module, (*JOB_PROCESS, *HEAVY)) == []


@pytest.mark.parametrize("module", project_modules("judge"))
def test_the_judge_imports_nothing_from_beside_the_kernel(module: str) -> None:
    assert offending(module, ("kernel_side",)) == []


@pytest.mark.parametrize("module", project_modules("kernel_side"))
def test_the_kernels_side_imports_nothing_of_the_judges(module: str) -> None:
    assert offending(module, ("judge",)) == []


@pytest.mark.parametrize("module", ["worker_host.sandbox", *project_modules("harness")])
def test_the_sandbox_and_the_harness_import_neither_side(module: str) -> None:
    assert offending(module, ("judge", "kernel_side")) == []


@pytest.mark.parametrize("module", modules_of(SERVER))
def test_no_server_module_imports_itself_back(module: str) -> None:
    """No import cycle, not even one that only type checking follows: two modules that need
    each other are one concept, or share a third that both import."""
    assert reaches(module).get(module) is None


def test_the_server_starts_job_processes_by_name_only() -> None:
    """The zygote and the ncu target are launched as ``python -m``; named in the server as
    strings, never imported (the test above would not see a string)."""
    for name in LAUNCHED:
        assert module_path(name) is not None, f"{name} is launched but does not exist"
    server_text = "\n".join((module_path(m) or Path()).read_text() for m in modules_of(SERVER)
                            if module_path(m) is not None)
    for name in LAUNCHED:
        assert name in server_text, f"nothing in the server launches {name} any more"


def test_the_boundary_check_sees_a_forbidden_import() -> None:
    """The check itself: a server module that imported the judge would be caught."""
    direct_imports.cache_clear()
    try:
        assert offending("subprocess_worker", ("judge",)) != []
    finally:
        direct_imports.cache_clear()
