"""docker-compose.yml, the README's configuration table and the settings agree on the server's
environment variables.

Every list is read from its file (the compose service's ``environment``, the table's first
column, the Dockerfile's ``ENV``) or from ``Settings.from_env`` itself (the names it looks up
in an empty environment), so a variable added to one place and forgotten in another fails
here, in the unit suite, not first in ``scripts/docker_smoke.sh``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import yaml

from shared.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"`([A-Z][A-Z0-9_]+)`")
ALIAS = re.compile(r"\(or [^)]*\)")


def readme_table() -> dict[str, set[str]]:
    """The README's "Configuration" table: each row's first variable, and its aliases
    (``ENABLE_DEVICE_METRICS` (or `ENABLE_NCU`)``), by the row they are on."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, set[str]] = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        first_column = line.split("|")[1]
        names = NAME.findall(ALIAS.sub("", first_column))
        aliases = set(NAME.findall(first_column)) - set(names)
        for name in names:
            rows[name] = aliases
    return rows


def compose_environment() -> set[str]:
    """The names the compose service passes to the container (list or mapping form)."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    environment = compose["services"]["kernel-eval"].get("environment") or []
    if isinstance(environment, Mapping):
        return set(environment)
    return {entry.split("=", 1)[0] for entry in environment}


def image_environment() -> set[str]:
    """The names the Dockerfile's ``ENV`` instructions set (continuation lines joined)."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    instructions = re.sub(r"\\\n", " ", text).splitlines()
    return {
        name
        for line in instructions
        if line.split(None, 1)[:1] == ["ENV"]
        for name in re.findall(r"\b([A-Z][A-Z0-9_]*)=", line)
    }


class _Recording(Mapping[str, str]):
    """An empty environment that remembers every name looked up in it."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def __getitem__(self, name: str) -> str:
        self.names.add(name)
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def settings_environment() -> set[str]:
    """The names ``Settings.from_env`` reads (``in``, ``get`` and ``[]`` all look them up)."""
    environ = _Recording()
    Settings.from_env(environ)
    return environ.names


def test_the_parsers_find_what_is_there() -> None:
    """Guards the checks below: an empty list on either side would make them vacuous."""
    table = readme_table()
    assert {"MAX_WORKERS", "SANDBOX", "API_KEY"} <= set(table)
    assert "ENABLE_NCU" in table["ENABLE_DEVICE_METRICS"] and "ENABLE_NCU" not in table
    assert {"MAX_WORKERS", "API_KEY"} <= compose_environment()
    assert {"JOB_STORE_PATH", "PORT"} <= image_environment()
    assert {"MAX_WORKERS", "ENABLE_NCU", "RAY_ADDRESS"} <= settings_environment()


def test_compose_passes_only_variables_of_the_readme_table() -> None:
    table = readme_table()
    documented = set(table).union(*table.values())
    assert compose_environment() - documented == set()


def test_every_variable_of_the_readme_table_reaches_the_container() -> None:
    """Through the compose file, or set by the image (HOST, PORT, the paths under /data)."""
    reaching = compose_environment() | image_environment()
    assert set(readme_table()) - reaching == set()


def test_the_readme_table_documents_exactly_what_the_settings_read() -> None:
    table = readme_table()
    documented = set(table).union(*table.values())
    read = settings_environment()
    assert (sorted(read - documented), sorted(documented - read)) == ([], [])
