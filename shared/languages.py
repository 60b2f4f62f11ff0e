"""The kernel languages a ``torch`` kernel (KernelBench's ``ModelNew``) may be written in beside
torch and Triton: NVIDIA's CuTe DSL, TileLang, PyTorch's Helion and NVIDIA's cuTile.

Each is an optional extra of the project (``pip install 'kernel-eval-server[dsl]'``, or one
language's extra). The server never imports them: it reads whether they are installed, and
their versions, from the package metadata (:func:`listing`, for ``/health``), and on a GPU
host the worker probe imports each installed one in a process of its own
(:func:`import_errors`): an installed version that does not import against this host's torch
is reported with the error, not as available. In a job's
process, a source that imports one that is missing, or that cannot run on this device, is a
``compile_error`` naming the language and what is missing (:func:`unavailable_message`), not
a bare ``ModuleNotFoundError`` or a failure deep in a JIT compiler.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata

from shared.models import LanguageInfo


@dataclass(frozen=True)
class Language:
    name: str  # as /health lists it
    title: str
    module: str  # what a source imports (dotted for a subpackage)
    distribution: str  # the PyPI package
    extra: str  # the project's extra that installs it
    # compute capability majors it generates code for (None: any CUDA GPU its compiler knows)
    majors: tuple[int, ...] | None
    needs: str  # the requirement in words, for the answer that it is not met


LANGUAGES: tuple[Language, ...] = (
    Language("cute_dsl", "CuTe DSL (CUTLASS Python)", "cutlass", "nvidia-cutlass-dsl", "cute",
             (8, 9, 10, 11, 12), "an NVIDIA GPU of compute capability 8.0 or newer"),
    Language("tilelang", "TileLang", "tilelang", "tilelang", "tilelang",
             (8, 9, 10, 11, 12), "an NVIDIA GPU of compute capability 8.0 or newer"),
    Language("helion", "Helion", "helion", "helion", "helion",
             (8, 9, 10, 11, 12), "an NVIDIA GPU of compute capability 8.0 or newer (through Triton)"),
    # cuTile's Tile IR targets compute capability 8.x and 10.x-12.x (not Hopper's 9.0), with a
    # driver of r580 or newer
    Language("cutile", "cuTile Python", "cuda.tile", "cuda-tile", "cutile",
             (8, 10, 11, 12), "an NVIDIA GPU of compute capability 8.x, 10.x, 11.x or 12.x "
             "(not 9.0), a driver of r580 or newer, and its tileiras compiler "
             "(cuda-tile[tileiras], or a CUDA 13.1+ toolkit on the PATH)"),
)


def importable(language: Language) -> bool:
    """Whether the language's module can be imported here (found, not imported: a dotted
    module's parent package is imported to look inside it)."""
    try:
        return importlib.util.find_spec(language.module) is not None
    except (ImportError, ValueError):
        return False


def installed_version(language: Language) -> str | None:
    """The installed version ("unknown" where the module is found without package metadata),
    or None when the module cannot be imported here."""
    if not importable(language):
        return None
    try:
        return metadata.version(language.distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


def install_hint(language: Language) -> str:
    return (f"install the project's '{language.extra}' extra (pip install "
            f"'kernel-eval-server[{language.extra}]', or pip install {language.distribution})")


# the languages that are installed but failed to import in the worker probe, {name: error},
# handed to every worker by the server (a job then gets the probe's reason, not a traceback)
IMPORT_ERRORS_ENV = "KES_LANGUAGE_IMPORT_ERRORS"
IMPORT_TIMEOUT_S = 120.0


def import_errors(languages: tuple[Language, ...] = LANGUAGES,
                  timeout: float = IMPORT_TIMEOUT_S) -> dict[str, str]:
    """Import each installed one of ``languages`` in a fresh interpreter of its own, all at
    once; the ones that fail, with the last line of their error.

    Finding the package is not enough: a release built against a newer torch than the host's
    installs cleanly and fails on import (Helion 1.5 on torch 2.11).
    """
    chosen = [lang for lang in languages if importable(lang)]
    procs = {lang.name: subprocess.Popen(
        [sys.executable, "-c", f"import {lang.module}"], stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for lang in chosen}
    deadline = time.monotonic() + timeout
    errors: dict[str, str] = {}
    for name, proc in procs.items():
        try:
            _, stderr = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            errors[name] = f"importing it took longer than {timeout:.0f} s"
            continue
        if proc.returncode != 0:
            lines = [ln for ln in stderr.decode(errors="replace").splitlines() if ln.strip()]
            errors[name] = lines[-1].strip()[:500] if lines else f"exit code {proc.returncode}"
    return errors


def probed_import_errors() -> dict[str, str]:
    """What the server handed this worker: the probe's import errors, by language."""
    try:
        found = json.loads(os.environ.get(IMPORT_ERRORS_ENV) or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def why_unavailable(language: Language, device: str, capability: str | None,
                    version: str | None, import_error: str | None = None) -> str | None:
    """Why ``language`` cannot run kernels here, or None when it can."""
    if version is None:
        return f"{language.distribution} is not installed: {install_hint(language)}"
    if import_error:
        return (f"{language.distribution} {version} is installed but does not import here "
                f"({import_error}); install a release built for this host's torch")
    if device != "cuda":
        return f"it needs a CUDA GPU ({language.needs}); this server runs in CPU mode"
    if language.majors is not None and capability:
        try:
            major = int(capability.split(".")[0])
        except ValueError:
            return None
        if major not in language.majors:
            return f"it needs {language.needs}; this GPU's compute capability is {capability}"
    return None


def versions() -> dict[str, str | None]:
    """Each language's installed version here, by name (None: not importable)."""
    return {language.name: installed_version(language) for language in LANGUAGES}


def listing(device: str, capability: str | None,
            found: dict[str, str | None] | None = None,
            failed: dict[str, str] | None = None) -> list[LanguageInfo]:
    """Every language, its version and whether it can run here (for /health); ``found``: the
    versions as the workers' environment reported them (:func:`versions`), else this one's;
    ``failed``: the languages that did not import there (:func:`import_errors`)."""
    found = versions() if found is None else found
    failed = failed or {}
    out = []
    for language in LANGUAGES:
        version = found.get(language.name)
        reason = why_unavailable(language, device, capability, version,
                                 failed.get(language.name))
        out.append(LanguageInfo(name=language.name, title=language.title,
                                module=language.module, distribution=language.distribution,
                                version=version, available=reason is None, reason=reason))
    return out


def imported_languages(source: str) -> list[Language]:
    """The languages ``source`` imports (by its import statements; [] if it does not parse)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return [lang for lang in LANGUAGES
            if any(n == lang.module or n.startswith(lang.module + ".") for n in names)]


def unavailable_message(source: str, device: str, capability: str | None) -> str | None:
    """The compile error for a source that uses a language that cannot run here, or None."""
    return first_unavailable(imported_languages(source), device, capability)


def first_unavailable(used: list[Language], device: str, capability: str | None) -> str | None:
    """The compile error for the first of ``used`` that cannot run here, or None."""
    failed = probed_import_errors()
    for language in used:
        reason = why_unavailable(language, device, capability, installed_version(language),
                                 failed.get(language.name))
        if reason is not None:
            return (f"this kernel is written in {language.title} (it imports "
                    f"{language.module}), which is not available on this server: {reason}")
    return None
