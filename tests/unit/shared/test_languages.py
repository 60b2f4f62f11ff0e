"""The kernel languages beside torch and Triton (shared.languages): which a source uses, and
whether each can run here, said in words a user can act on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared import languages
from shared.languages import imported_languages, listing, unavailable_message


def names(source: str) -> list[str]:
    return [lang.name for lang in imported_languages(source)]


@pytest.mark.parametrize(("source", "expected"), [
    ("import cutlass\nimport cutlass.cute as cute\n", ["cute_dsl"]),
    ("import tilelang.language as T\n", ["tilelang"]),
    ("from helion import language as hl\n", ["helion"]),
    ("import cuda.tile as ct\n", ["cutile"]),
    ("from cuda import tile\n", ["cutile"]),
    ("from cuda.tile import kernel\n", ["cutile"]),
    ("import cuda.bindings.driver\nimport triton\nimport torch\n", []),
    ("import tilelangx\nfrom .helion import x\n", []),
    ("def f(:\n", []),  # does not parse: its compile error is the syntax error's
])
def test_the_languages_a_source_imports_are_read_from_its_import_statements(
        source: str, expected: list[str]) -> None:
    assert names(source) == expected


def test_every_language_is_listed_with_its_reason_when_it_is_not_installed() -> None:
    found = {lang.name: None for lang in languages.LANGUAGES}
    listed = listing("cuda", "9.0", found)
    assert [i.name for i in listed] == ["cute_dsl", "tilelang", "helion", "cutile"]
    for info in listed:
        assert info.version is None and not info.available
        assert info.reason is not None and "not installed" in info.reason
        assert f"kernel-eval-server[{info.name if info.name != 'cute_dsl' else 'cute'}]" \
            in info.reason


def test_an_installed_language_needs_a_gpu_and_cutile_one_other_than_hopper() -> None:
    found = {lang.name: "1.0" for lang in languages.LANGUAGES}
    on_cpu = listing("cpu", None, found)
    assert all(not i.available and "CPU mode" in (i.reason or "") for i in on_cpu)
    on_h100 = {i.name: i for i in listing("cuda", "9.0", found)}
    assert on_h100["tilelang"].available and on_h100["helion"].available
    assert on_h100["cute_dsl"].available and on_h100["cute_dsl"].reason is None
    assert not on_h100["cutile"].available
    assert "compute capability is 9.0" in (on_h100["cutile"].reason or "")
    on_blackwell = {i.name: i for i in listing("cuda", "10.0", found)}
    assert all(i.available for i in on_blackwell.values())
    on_volta = {i.name: i for i in listing("cuda", "7.0", found)}
    assert not any(i.available for i in on_volta.values())


def test_a_source_in_a_missing_language_gets_a_message_naming_it_and_the_extra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(languages, "installed_version", lambda language: None)
    message = unavailable_message("import torch\nimport tilelang\n", "cuda", "9.0")
    assert message is not None
    assert message.startswith("this kernel is written in TileLang (it imports tilelang)")
    assert "pip install 'kernel-eval-server[tilelang]'" in message
    assert unavailable_message("import torch\n", "cuda", "9.0") is None


def fake_language(name: str, module: str) -> languages.Language:
    return languages.Language(name, name.title(), module, name, name, None, "a GPU")


def test_an_installed_language_that_fails_to_import_is_reported_with_its_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a release built for a newer torch: found, installed, and broken on import
    (tmp_path / "kes_broken_lang").mkdir()
    (tmp_path / "kes_broken_lang" / "__init__.py").write_text(
        "from os import NameOnlyInANewerRelease\n")
    (tmp_path / "kes_good_lang.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    broken, good = fake_language("broken", "kes_broken_lang"), fake_language("good", "kes_good_lang")
    missing = fake_language("missing", "kes_lang_not_installed")
    errors = languages.import_errors((broken, good, missing))
    assert list(errors) == ["broken"]
    assert "NameOnlyInANewerRelease" in errors["broken"] and "ImportError" in errors["broken"]


def test_a_language_that_failed_to_import_is_unavailable_on_health_and_in_a_job(
        monkeypatch: pytest.MonkeyPatch) -> None:
    found = {lang.name: "1.5.1" for lang in languages.LANGUAGES}
    failed = {"helion": "ImportError: cannot import name 'IntelGPUError'"}
    listed = {i.name: i for i in listing("cuda", "9.0", found, failed)}
    assert listed["tilelang"].available and not listed["helion"].available
    assert "helion 1.5.1 is installed but does not import here" in (listed["helion"].reason or "")
    assert "IntelGPUError" in (listed["helion"].reason or "")
    # a job's worker gets the probe's errors from the server through its environment
    monkeypatch.setenv(languages.IMPORT_ERRORS_ENV, json.dumps(failed))
    monkeypatch.setattr(languages, "installed_version", lambda language: "1.5.1")
    message = unavailable_message("import helion\n", "cuda", "9.0")
    assert message is not None and "written in Helion" in message and "IntelGPUError" in message
    assert unavailable_message("import tilelang\n", "cuda", "9.0") is None
