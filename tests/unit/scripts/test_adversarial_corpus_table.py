"""scripts/adversarial_corpus.py's table, from rows as the corpus writes them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[3]


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("adversarial_corpus",
                                                  ROOT / "scripts" / "adversarial_corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(cheat: str, outcome: str, met: bool, seen: bool = False,
        known: str | None = None) -> dict[str, Any]:
    reading = {"speedup": 1.0, "median_ms": 1.0, "mean_ms": 1.0}
    return {"cheat": cheat, "family": "readings_again", "size": "1ms", "n": 3072,
            "device": "cuda", "expect": "bounded", "outcome": outcome, "check": None,
            "met": met, "detail": f"{cheat} detail", "known_win": known,
            "known_win_seen": seen, "cheat_reading": reading, "honest_reading": reading,
            "relative": 1.0, "allowed_relative": 1.03}


def test_the_table_tells_met_expectations_from_known_wins_and_misses(tmp_path: Path) -> None:
    rows = [row("a_1ms", "bounded", True), row("b_1ms", "won", False, True, "b wins by chance"),
            row("c_1ms", "won", False)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert load().main(["--table", str(path), "--out", str(tmp_path)]) == 0
    text = (tmp_path / "corpus_table.md").read_text()
    assert "3 cheats; expectation met by 1; known wins seen (expected failures): b_1ms; " \
           "not met otherwise: c_1ms." in text
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(lines) == 1 + len(rows)  # the header and one line per cheat
    assert all(line.count(" | ") == lines[0].count(" | ") for line in lines)
    b_line = next(line for line in lines if line.startswith("| b_1ms"))
    assert "known win" in b_line and "b wins by chance" in b_line
    c_line = next(line for line in lines if line.startswith("| c_1ms"))
    assert "**no**" in c_line and "c_1ms detail" in c_line
