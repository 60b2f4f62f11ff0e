"""``kernel_eval_client.__all__`` lists exactly the package's public names, and misses none
of the classes and functions its modules define for users (httpx's test_exported_members)."""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType

import kernel_eval_client

SUBMODULES = ("client", "_http", "exceptions", "io_contract", "models", "result_metadata", "cli",
              "cli_format")
# Defined in the submodules but deliberately not exported from the package.
NOT_EXPORTED = {
    "LegacyCompareRequest",  # the old request form; the server's concern
    "CleanupResponse",  # answer of an admin route the client does not call
    "UsageError",  # the CLI's own
    "build_parser",  # the CLI's own
    "candidate_files",
    "format_batch_line",
    "format_batch_table",
    "format_comparison",  # the CLI's own
    "format_evaluation",
    "format_health",
    "format_job",
    "format_stats",
    "infer_kernel_type",
    "main",
}


def test_all_lists_every_public_name_of_the_package_once() -> None:
    public = {
        name
        for name, value in vars(kernel_eval_client).items()
        if (not name.startswith("_") or name == "__version__") and not isinstance(value, ModuleType)
    }

    assert len(kernel_eval_client.__all__) == len(set(kernel_eval_client.__all__))
    assert set(kernel_eval_client.__all__) == public


def test_every_public_class_and_function_of_the_submodules_is_exported() -> None:
    missing = []
    for module_name in SUBMODULES:
        module = importlib.import_module(f"kernel_eval_client.{module_name}")
        for name, value in vars(module).items():
            defined_here = getattr(value, "__module__", None) == module.__name__
            if (
                defined_here
                and (inspect.isclass(value) or inspect.isfunction(value))
                and not name.startswith("_")
                and name not in NOT_EXPORTED
                and name not in kernel_eval_client.__all__
            ):
                missing.append(f"{module_name}.{name}")

    assert missing == []


def test_not_exported_names_still_exist() -> None:
    defined = {
        name
        for module_name in SUBMODULES
        for name in vars(importlib.import_module(f"kernel_eval_client.{module_name}"))
    }
    assert NOT_EXPORTED - defined == set()


def test_the_client_package_stays_light() -> None:
    """No torch and no server code: the client installs with pydantic and httpx alone."""
    for module_name in SUBMODULES:
        source = inspect.getsource(importlib.import_module(f"kernel_eval_client.{module_name}"))
        for forbidden in ("import torch", "from shared", "from orchestration", "import mcp"):
            assert forbidden not in source, f"{module_name} has {forbidden!r}"
